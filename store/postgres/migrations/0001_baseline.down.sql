DROP TABLE IF EXISTS {{schema}}.leases, {{schema}}.ready, {{schema}}.event_subscribers, {{schema}}.queue_flow_slots,
    {{schema}}.queue_buckets, {{schema}}.queue_fair, {{schema}}.queue_keys, {{schema}}.key_buckets, {{schema}}.schedules,
    {{schema}}.workers, {{schema}}.task_log, {{schema}}.throughput, {{schema}}.batches, {{schema}}.signals,
    {{schema}}.sequences, {{schema}}.ended_log;
DROP VIEW IF EXISTS {{schema}}.task_history;
DROP TABLE IF EXISTS {{schema}}.task_history_rows, {{schema}}.tasks, {{schema}}.queues;
DROP FUNCTION IF EXISTS {{schema}}.sequence_moved();
DROP SEQUENCE IF EXISTS {{schema}}.worker_seq, {{schema}}.ready_seq;
