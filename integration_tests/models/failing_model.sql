{# Its compaction is forced to fail (WHERE on a non-partition column); on_error: warn keeps the model green. #}
{{ config(
    materialized='table',
    partition_by=['event_date'],
    meta={'delta_optimize': {'mode': 'optimize', 'where': 'amount > 5', 'on_error': 'warn'}}
) }}
select /*+ REPARTITION(2) */ id, cast(event_date as date) as event_date, amount from {{ ref('raw_events') }}
