-- wrk script for scripts/overhead.sh (WRK=1): one chat completion per
-- request; each connection waits 10 ms between requests, so that ten
-- connections send about 1,000 requests/s.
wrk.method = "POST"
wrk.body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}'
wrk.headers["Content-Type"] = "application/json"
function delay() return 10 end
