{# A LITE VACUUM after the write when the last one is older than vacuum_lite_every (tests/test_dbt_settings.py;
   enabled by the var ddo_vacuum_lite). The table keeps delta-spark's default retention (7 days): nothing young
   is deleted, the runs show in the log as VACUUM START / VACUUM END. #}
{{ config(
    enabled=var('ddo_vacuum_lite', false),
    materialized='incremental',
    incremental_strategy='append',
    meta={'delta_optimize': {'vacuum_lite_every': var('lite_every', '7d')}}
) }}
select {{ var('batch', 0) }} as id
