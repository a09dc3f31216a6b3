{# Settings in the default mode (tests/test_dbt_settings.py; enabled by the var ddo_settings): 2 partitions,
   auto compaction once each partition holds 2 small files, one commit per compacted bin (commit_every: 1). #}
{{ config(
    enabled=var('ddo_settings', false),
    materialized='incremental',
    incremental_strategy='append',
    partition_by=['event_date'],
    tags=['ddo_settings'],
    meta={'delta_optimize': {'min_num_files': 2, 'commit_every': 1}}
) }}
select
    id + {{ var('batch', 0) }} * 1000 as id,
    cast(event_date as date) as event_date,
    user_id,
    amount
from {{ ref('raw_events') }}
where event_date in ('2024-01-01', '2024-01-02')
