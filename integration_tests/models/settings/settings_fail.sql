{# on_error: fail (enabled by the var ddo_settings): its OPTIMIZE is refused (WHERE on a non-partition column),
   and the model fails with the hook's line. #}
{{ config(
    enabled=var('ddo_settings', false),
    materialized='table',
    partition_by=['event_date'],
    meta={'delta_optimize': {'mode': 'optimize', 'where': 'amount > 5', 'on_error': 'fail'}}
) }}
select id, cast(event_date as date) as event_date, amount from {{ ref('raw_events') }}
