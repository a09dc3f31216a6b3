{#- on-run-end: one pass over every model the run built (instead of per-model post-hooks).
    on-run-end: ["{{ dbt_delta_optimize.on_run_end(results) }}"] -#}
{% macro on_run_end(results=none) %}
  {{ return(adapter.dispatch('on_run_end', 'dbt_delta_optimize')(results)) }}
{% endmacro %}

{% macro default__on_run_end(results) %}
  {% if not execute or dbt_delta_optimize._delta_optimize_skip_run() %}{{ return('') }}{% endif %}
  {% if results is none or results is string or results is mapping or results is not iterable %}
    {{ exceptions.raise_compiler_error("dbt_delta_optimize.on_run_end needs dbt's run results: call it as dbt_delta_optimize.on_run_end(results) in on-run-end.") }}
  {% endif %}
  {% set bridge = dbt_delta_optimize._delta_optimize_bridge() %}
  {% for res in results if res.node.resource_type == 'model' and res.status in ('success', 'partial success')
                          and dbt_delta_optimize._delta_optimize_has_files(res.node.config.materialized, res.node.name) %}
    {% set settings = res.node.config.get('meta', {}).get('delta_optimize', {}) or {} %}
    {% set result = bridge.run_model(dbt_delta_optimize._delta_optimize_table_name(node=res.node), settings, model=res.node.name,
                                     file_format=res.node.config.get('file_format'),
                                     invocation_id=invocation_id, target_path=flags.TARGET_PATH,
                                     run_started_at=run_started_at,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
    {% do dbt_delta_optimize._delta_optimize_report(result, settings.get('on_error', 'warn') if settings is mapping else 'warn') %}
  {% endfor %}
  {{ return('') }}
{% endmacro %}
