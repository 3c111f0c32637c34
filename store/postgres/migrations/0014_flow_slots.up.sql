-- Norn schema version 14: the shared path's slot rows. One row per
-- (flow-limited queue, slot): how many tasks the claims holding that slot
-- may have admitted (a claim adds its largest possible batch; the
-- exclusive path adds its own to slot 0), and the last count of the
-- queue's running tasks a claim of that slot made, with the admitted sum
-- and the queue row's version it read with it. A later shared claim
-- bounds the running tasks by count + admitted since, instead of counting
-- them (docs/postgres.md, Flow control).
CREATE TABLE {{schema}}.queue_flow_slots (
    queue         text COLLATE "C" NOT NULL,
    slot          integer NOT NULL,
    admitted      bigint NOT NULL,
    cert_ver      text,
    cert_running  bigint,
    cert_admitted bigint,
    PRIMARY KEY (queue, slot)
);
