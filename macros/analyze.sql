{#- dbt run-operation analyze --args '{select: "model_a model_b" | table: schema.table, columns: [a, b], all: false, where: ..., dry_run: true}'
    Computes the per-file statistics the files of every selected Delta model (names, tag:NAME, or * for all
    models) lack, exactly as delta-spark writes them (with all: true, every file's), committed as COMPUTE STATS;
    one line per table. On a thrift, http or odbc connection it says once that it is not available there. -#}
{% macro analyze(select=none, table=none, columns=none, all=false, where=none, dry_run=false) %}
  {{ return(adapter.dispatch('analyze', 'dbt_delta_optimize')(select, table, columns, all, where, dry_run)) }}
{% endmacro %}

{% macro default__analyze(select, table, columns, all, where, dry_run) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% if select is none and table is none %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze needs select (model names, tag:NAME or *) or table (schema.table).") }}
  {% endif %}
  {% if select is not none and not (select is string or (select is iterable and select is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: select must be a string or a list of selectors, got " ~ select) }}
  {% endif %}
  {% if table is not none and table is not string %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: table must be a string (schema.table), got " ~ table) }}
  {% endif %}
  {% if columns is not none and not (columns is string or (columns is iterable and columns is not mapping)) %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: columns must be a list of column names (or 'a,b'), got " ~ columns) }}
  {% endif %}
  {% for flag in [all, dry_run] %}
    {% if flag is not sameas true and flag is not sameas false %}
      {{ exceptions.raise_compiler_error("dbt_delta_optimize.analyze: all and dry_run must be true or false, got " ~ flag) }}
    {% endif %}
  {% endfor %}
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
