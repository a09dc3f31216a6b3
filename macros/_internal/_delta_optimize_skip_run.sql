{#- True when the run was told to skip all optimization: --vars '{DELTA_OPTIMIZE_SKIP: true}'. -#}
{% macro _delta_optimize_skip_run() %}
  {{ return(var('DELTA_OPTIMIZE_SKIP', false) in [true, 'true', 'True', 1, '1']) }}
{% endmacro %}
