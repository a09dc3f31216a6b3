{#- dbt run-operation purge --args '{select: "model_a model_b" | table: schema.table, where: ..., dry_run: true}'
    REORG TABLE ... APPLY (PURGE) for every selected Delta model (names, tag:NAME, or * for all models): rewrites
    every file with deleted rows (deletion vectors) and logs one line per table; with dry_run it only plans. -#}
{% macro purge(select=none, table=none, where=none, dry_run=false) %}
  {{ return(adapter.dispatch('purge', 'dbt_delta_optimize')(select, table, where, dry_run)) }}
{% endmacro %}

{% macro default__purge(select, table, where, dry_run) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% if select is none and table is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.purge needs select (model names, tag:NAME or *) or table (schema.table).") }}
  {% endif %}
  {% if select is not none and not (select is string or (select is iterable and select is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.purge: select must be a string or a list of selectors, got " ~ select) }}
  {% endif %}
  {% if table is not none and table is not string %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.purge: table must be a string (schema.table), got " ~ table) }}
  {% endif %}
  {% if dry_run is not sameas true and dry_run is not sameas false %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.purge: dry_run must be true or false, got " ~ dry_run) }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_purge(t.table, where=where, dry_run=dry_run, model=t.model,
                                     file_format=t.file_format, invocation_id=invocation_id,
                                     target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
