DROP TABLE IF EXISTS {{schema}}.throughput;
