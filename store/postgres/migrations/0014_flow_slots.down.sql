DROP TABLE IF EXISTS {{schema}}.queue_flow_slots;
