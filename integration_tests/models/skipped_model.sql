{{ config(materialized='table', meta={'delta_optimize': {'skip': true}}) }}
select /*+ REPARTITION(3) */ id, user_id from {{ ref('raw_events') }}
