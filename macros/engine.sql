{#- dbt run-operation delta_optimize_engine
    Logs what the hooks of this target will run on: dbt's Spark session, a Spark Connect server, or dbt's
    own SQL connection (thrift, http, odbc), read from dbt's adapter. Opens no connection, starts no Spark. -#}
{% macro delta_optimize_engine() %}
  {% if not execute %}{{ return('') }}{% endif %}
  {% set info = dbt_delta_optimize._delta_optimize_bridge().describe_engine(dbt_delta_optimize._delta_optimize_spark_target()) %}
  {{ log(info.line, info=true) }}
  {{ return(info) }}
{% endmacro %}
