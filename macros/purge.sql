{#- dbt run-operation purge --args '{select: "model_a model_b" | table: schema.table, where: ..., dry_run: true, settings: {...}}'
    REORG TABLE ... APPLY (PURGE) for every selected Delta model (names, tag:NAME, or * for all models): rewrites
    every file with deleted rows (deletion vectors) and logs one line per table; with dry_run it only plans.
    A selected model's meta.delta_optimize OPTIMIZE settings apply, under `settings`. -#}
{% macro purge(select=none, table=none, where=none, dry_run=false, settings=none) %}
  {{ return(adapter.dispatch('purge', 'dbt_delta_optimize')(select, table, where, dry_run, settings)) }}
{% endmacro %}

{% macro default__purge(select, table, where, dry_run, settings=none) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% do dbt_delta_optimize._delta_optimize_check_args('purge', select, table, dry_run, settings) %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_purge(t.table, where=where, dry_run=dry_run, settings=settings, meta=t.meta,
                                     model=t.model, file_format=t.file_format, invocation_id=invocation_id,
                                     target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
