-- venturi schema, version 4: a completed job's result. Forward-only.
--
-- What a run gave ctx.set_result(value) (JSON), written by the settle that completes
-- the job, in the statement that completes it (docs/concepts/results.md). NULL for
-- every job that has not completed, or completed without setting one. Nullable
-- without a default, so adding it rewrites no row; a large value is TOASTed out of
-- line, so the row a claim scans stays narrow.
ALTER TABLE {prefix}jobs ADD COLUMN IF NOT EXISTS result jsonb;
