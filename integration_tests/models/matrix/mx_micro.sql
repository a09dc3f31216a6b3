{# A microbatch model (one commit per day batch, 8 files each), with the package's pre-hook. #}
{{ config(
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='ts',
    batch_size='day',
    begin='2026-01-01',
    lookback=1,
    partition_by=['d']
) }}
select /*+ REPARTITION(8) */ id, d, ts, user_id, amount from {{ ref('mx_events') }}
