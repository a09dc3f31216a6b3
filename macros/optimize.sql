{#- dbt run-operation optimize --args '{select: "model_a model_b" | table: schema.table, where: ..., zorder_by: [...], dry_run: true,
    settings: {max_duration: 10m, commit_every: 1, ...}}'
    Optimizes every selected Delta model (names, tag:NAME, or * for all models) and logs one line per table;
    with dry_run it only plans. A selected model's meta.delta_optimize OPTIMIZE settings apply, under `settings`.
    where, zorder_by and settings are validated by the Python package. -#}
{% macro optimize(select=none, table=none, where=none, zorder_by=none, dry_run=false, settings=none) %}
  {{ return(adapter.dispatch('optimize', 'dbt_delta_optimize')(select, table, where, zorder_by, dry_run, settings)) }}
{% endmacro %}

{% macro default__optimize(select, table, where, zorder_by, dry_run, settings=none) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% do dbt_delta_optimize._delta_optimize_check_args('optimize', select, table, dry_run, settings) %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {#- run-operation may not have opened the adapter's session yet: make dbt-spark create it, with the profile's confs -#}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_operation(t.table, where=where, zorder_by=zorder_by, dry_run=dry_run,
                                         settings=settings, meta=t.meta, model=t.model,
                                         file_format=t.file_format, invocation_id=invocation_id,
                                         target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
