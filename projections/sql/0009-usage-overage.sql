-- Jobs created as overage (beyond the allowance, with overage on) are counted when they are
-- created: a plan change later in the period must not turn earlier jobs into billed overage.
ALTER TABLE project_usage ADD COLUMN overage bigint NOT NULL DEFAULT 0;
