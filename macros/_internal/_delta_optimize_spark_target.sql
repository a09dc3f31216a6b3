{#- How the hooks reach Spark: dbt-spark's connection method, and a Spark Connect server for the server
    methods (thrift, http, odbc): the var delta_optimize_spark_remote (sc://host:port), else $SPARK_REMOTE. -#}
{% macro _delta_optimize_spark_target() %}
  {{ return({'method': target.get('method', 'session'), 'remote': var('delta_optimize_spark_remote', none)}) }}
{% endmacro %}
