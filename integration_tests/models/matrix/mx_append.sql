{# append, without the pre-hook: the 4 days before today when created, then the day before
   yesterday and today (3 files each). #}
{{ config(materialized='incremental', incremental_strategy='append', partition_by=['d'], meta={'no_pre_hook': true}) }}
select /*+ REPARTITION(3) */ id, d, ts, user_id, amount from {{ ref('mx_events') }}
{% if is_incremental() %}
where d in (date_sub(current_date(), 2), current_date())
{% else %}
where d < current_date()
{% endif %}
