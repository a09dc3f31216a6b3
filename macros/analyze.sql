{#- dbt run-operation analyze --args '{select: "model_a model_b" | table: schema.table, columns: [a, b], all: false, where: ..., dry_run: true}'
    Computes the per-file statistics the files of every selected Delta model (names, tag:NAME, or * for all
    models) lack, exactly as delta-spark writes them (with all: true, every file's), committed as COMPUTE STATS;
    one line per table. On a thrift, http or odbc connection it says once that it is not available there. -#}
{% macro analyze(select=none, table=none, columns=none, all=false, where=none, dry_run=false) %}
  {{ return(adapter.dispatch('analyze', 'dbt_delta_optimize')(select, table, columns, all, where, dry_run)) }}
{% endmacro %}

{% macro default__analyze(select, table, columns, all, where, dry_run) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% do dbt_delta_optimize._delta_optimize_check_args('analyze', select, table, dry_run) %}
  {% if columns is not none and not (columns is string or (columns is iterable and columns is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: columns must be a list of column names (or 'a,b'), got " ~ columns) }}
  {% endif %}
  {% if all is not sameas true and all is not sameas false %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: all must be true or false, got " ~ all) }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_analyze(t.table, columns=columns, all=all, where=where, dry_run=dry_run,
                                       model=t.model, file_format=t.file_format, invocation_id=invocation_id,
                                       target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
