DROP TABLE IF EXISTS {{schema}}.workers;
DROP SEQUENCE IF EXISTS {{schema}}.worker_seq;
DROP TABLE IF EXISTS {{schema}}.task_log;
DROP TABLE IF EXISTS {{schema}}.task_history;
DROP TABLE IF EXISTS {{schema}}.tasks;
DROP TABLE IF EXISTS {{schema}}.queues;
