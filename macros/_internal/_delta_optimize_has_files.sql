{#- False for materializations that leave no table files (views, ephemeral models): hooks skip them
    silently, with a debug-level line, so project-wide hooks do not log a line per view. -#}
{% macro _delta_optimize_has_files(materialized, name) %}
  {% if materialized in ['view', 'ephemeral', 'materialized_view'] %}
    {{ log('delta_optimize ' ~ name ~ ': skipped (' ~ materialized ~ ' has no files)', info=false) }}
    {{ return(false) }}
  {% endif %}
  {{ return(true) }}
{% endmacro %}
