{#- dbt run-operation vacuum --args '{select: "model_a model_b" | table: schema.table, retain: 168, mode: full, dry_run: true}'
    Deletes the files of every selected Delta model (names, tag:NAME, or * for all models) that no version
    inside the retention needs (retain: hours, or 7d / 168h; default the table's
    delta.deletedFileRetentionDuration); mode lite deletes only what the log names. A retention shorter than
    the table's is refused unless allow_short_retention: true. A dry run lists the files. On a thrift, http or
    odbc connection it sends VACUUM <table> [LITE] RETAIN n HOURS [DRY RUN]. One line per table. -#}
{% macro vacuum(select=none, table=none, retain=none, mode='full', dry_run=false, allow_short_retention=false) %}
  {{ return(adapter.dispatch('vacuum', 'dbt_delta_optimize')(select, table, retain, mode, dry_run, allow_short_retention)) }}
{% endmacro %}

{% macro default__vacuum(select, table, retain, mode, dry_run, allow_short_retention) %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% do dbt_delta_optimize._delta_optimize_check_args('vacuum', select, table, dry_run) %}
  {% if mode not in ['full', 'lite'] %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.vacuum: mode must be 'full' or 'lite', got " ~ mode) }}
  {% endif %}
  {% if allow_short_retention is not sameas true and allow_short_retention is not sameas false %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.vacuum: allow_short_retention must be true or false, got " ~ allow_short_retention) }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% do run_query('select 1') %}
  {% for t in dbt_delta_optimize._delta_optimize_select(select, table) %}
    {% set result = bridge.run_vacuum(t.table, retain=retain, mode=mode, dry_run=dry_run,
                                      allow_short_retention=allow_short_retention,
                                      model=t.model, file_format=t.file_format, invocation_id=invocation_id,
                                      target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, 'warn') %}
  {% endfor %}
{% endmacro %}
