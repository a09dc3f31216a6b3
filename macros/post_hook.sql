{#- Post-hook: auto compaction (default) or a full OPTIMIZE of the model's table, per
    meta.delta_optimize. Renders to '' so no SQL statement is issued.
    +post-hook: "{{ dbt_delta_optimize.post_hook() }}" -#}
{% macro post_hook() %}
  {{ return(adapter.dispatch('post_hook', 'dbt_delta_optimize')()) }}
{% endmacro %}

{% macro default__post_hook() %}
  {% if not execute or not dbt_delta_optimize._delta_optimize_has_files(config.get('materialized'), this) %}{{ return('') }}{% endif %}
  {% if dbt_delta_optimize._delta_optimize_skip_run() %}
    {{ log('delta_optimize ' ~ this ~ ': skipped (DELTA_OPTIMIZE_SKIP)', info=true) }}
    {{ return('') }}
  {% endif %}
  {% set settings = config.meta_get('delta_optimize', {}) or {} %}
  {% set result = dbt_delta_optimize._delta_optimize_bridge().run_model(
      dbt_delta_optimize._delta_optimize_table_name(this), settings, model=model.name, file_format=config.get('file_format'),
      invocation_id=invocation_id, target_path=flags.TARGET_PATH, run_started_at=run_started_at,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
  {% do dbt_delta_optimize._delta_optimize_report(result, settings.get('on_error', 'warn') if settings is mapping else 'warn') %}
  {{ return('') }}
{% endmacro %}
