{# A microbatch model whose batch of 3 days ago fails while the gate (var mx_gate: a Delta table's path) has
   rows: `dbt run` commits the other batches, `dbt retry` the failed one once the gate is empty. Only built
   when mx_gate is given. #}
{{ config(
    enabled=var('ddo_matrix', false) and var('mx_gate', '') != '',
    materialized='incremental',
    incremental_strategy='microbatch',
    event_time='ts',
    batch_size='day',
    begin='2026-01-01',
    partition_by=['d']
) }}
select /*+ REPARTITION(8) */
    id,
    d,
    ts,
    user_id,
    case
        when d = date_sub(current_date(), 3) and (select count(*) from delta.`{{ var('mx_gate', '') }}`) > 0
        then cast(raise_error('the gate fails this batch') as double)
        else amount
    end as amount
from {{ ref('mx_events') }}
