{# Settings a SQL connection cannot honour (tests/test_dbt_thrift.py; enabled by the var ddo_sql_settings): a time
   budget and one commit per bin need our engine on a Spark session. Over thrift the hook runs without them and
   says so in one warning naming both. #}
{{ config(
    enabled=var('ddo_sql_settings', false),
    materialized='incremental',
    incremental_strategy='append',
    partition_by=['event_date'],
    meta={'delta_optimize': {'min_num_files': 2, 'commit_every': 1, 'max_duration': '1h'}}
) }}
select
    id + {{ var('batch', 0) }} * 1000 as id,
    cast(event_date as date) as event_date,
    user_id,
    amount
from {{ ref('raw_events') }}
where event_date in ('2024-01-01', '2024-01-02')
