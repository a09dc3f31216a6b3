{#- Pre-hook: save the table's version before the model writes (under dbt's target path, keyed by this
    invocation), so the post-hook's auto compaction looks exactly at this run's commits (a table that does not
    exist yet pins "before version 0"). Optional; without it the post-hook takes the commits stamped since the
    invocation started (run_started_at).  +pre-hook: "{{ dbt_delta_optimize.pre_hook() }}" -#}
{% macro pre_hook() %}
  {{ return(adapter.dispatch('pre_hook', 'dbt_delta_optimize')()) }}
{% endmacro %}

{% macro default__pre_hook() %}
  {% if not execute or dbt_delta_optimize._delta_optimize_skip_run() %}{{ return('') }}{% endif %}
  {% if not dbt_delta_optimize._delta_optimize_has_files(config.get('materialized'), this) %}{{ return('') }}{% endif %}
  {% do dbt_delta_optimize._delta_optimize_bridge().record_version(
      dbt_delta_optimize._delta_optimize_table_name(this), invocation_id=invocation_id, target_path=flags.TARGET_PATH,
      storage_options=var('delta_optimize_storage_options', none),
      spark_target=dbt_delta_optimize._delta_optimize_spark_target()) %}
  {{ return('') }}
{% endmacro %}
