-- done: write the done mark of a term's job, only if the lease still holds that term's record
-- (a fenced write: a holder that paused past its term cannot mark a job done).
--
-- KEYS[1]  lease key  P:{NAME}:lease
-- KEYS[2]  done key   P:{NAME}:done
-- ARGV[1]  record     the term's full record, as acquire returned it
-- ARGV[2]  finished   when the job finished, milliseconds since 1970 (the writer's clock)
-- ARGV[3]  code       the job's exit code, a decimal integer
-- ARGV[4]  ttl        how long the mark holds, in milliseconds (PX)
--
-- The mark "v1\n<finished>\n<code>\n<record>" names the record the lease held when it was
-- written, so a reader learns which term ran the job.
--
-- Reply: 1 the mark is written; 0 the lease is gone or held by another term: nothing written.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], 'v1\n' .. ARGV[2] .. '\n' .. ARGV[3] .. '\n' .. ARGV[1], 'PX', ARGV[4])
return 1
