{# mx_micro without the pre-hook (meta no_pre_hook): the post-hook finds the run's commits from the run's
   start. concurrent_batches: dbt-spark runs the batches one after another all the same. #}
{{ config(
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='ts',
    batch_size='day',
    begin='2026-01-01',
    concurrent_batches=true,
    partition_by=['d'],
    meta={'no_pre_hook': true}
) }}
select /*+ REPARTITION(8) */ id, d, ts, user_id, amount from {{ ref('mx_events') }}
