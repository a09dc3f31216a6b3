{#- dbt run-operation optimize --args '{select: "model_a model_b" | table: schema.table, where: ..., zorder_by: [...], dry_run: true}'
    Optimizes every selected Delta model (names, tag:NAME, or * for all models) and logs one line per table;
    with dry_run it only plans. where and zorder_by are validated by the Python package. -#}
{% macro optimize(select=none, table=none, where=none, zorder_by=none, dry_run=false) %}
  {{ return(adapter.dispatch('optimize', 'dbt_delta_optimize')(select, table, where, zorder_by, dry_run)) }}
{% endmacro %}

{% macro default__optimize(select, table, where, zorder_by, dry_run) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% if select is none and table is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.optimize needs select (model names, tag:NAME or *) or table (schema.table).") }}
  {% endif %}
  {% if select is not none and not (select is string or (select is iterable and select is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.optimize: select must be a string or a list of selectors, got " ~ select) }}
  {% endif %}
  {% if table is not none and table is not string %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.optimize: table must be a string (schema.table), got " ~ table) }}
  {% endif %}
  {% if dry_run is not sameas true and dry_run is not sameas false %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.optimize: dry_run must be true or false, got " ~ dry_run) }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {#- run-operation may not have opened the adapter's session yet: make dbt-spark create it, with the profile's confs -#}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_operation(t.table, where=where, zorder_by=zorder_by, dry_run=dry_run, model=t.model,
                                         file_format=t.file_format, invocation_id=invocation_id,
                                         target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
