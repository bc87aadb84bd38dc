-- wrk script: POST /v1/events/track with a random UUID v4 session id per
-- request (the worst case for session lookups), as a browser would send it,
-- with a random UUID v4 event_id as the SDK sends with every event.
-- The site id comes from the SITE_ID environment variable.
local site = os.getenv("SITE_ID") or "00000000-0000-4000-8000-000000000000"
local types = { "pageview", "pageview", "pageview", "adblock_detected", "wall_displayed" }
local counter = 0
-- Optional pacing: each connection waits DELAY_MS between requests.
local delay_ms = tonumber(os.getenv("DELAY_MS") or "0")

local function uuid4()
  local t = {}
  for i = 1, 16 do t[i] = math.random(0, 255) end
  t[7] = (t[7] % 16) + 64
  t[9] = (t[9] % 64) + 128
  return string.format("%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
    t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15], t[16])
end

-- Each thread seeds from /dev/urandom: the main Lua state's math.random is
-- never seeded, so seeding threads from it would replay the same ids in every
-- run, and the collector would answer duplicates instead of storing events.
local function urandom_seed()
  local f = assert(io.open("/dev/urandom", "rb"))
  local b = f:read(4)
  f:close()
  return ((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 128 + b:byte(4) % 128
end

function setup(thread)
  thread:set("seed", urandom_seed())
end

function init(args)
  math.randomseed(seed or os.time())
end

request = function()
  counter = counter + 1
  local body = string.format(
    '{"event_id":"%s","session_id":"%s","site_id":"%s","event_type":"%s","page_url":"https://news.example.com/article/%d","metadata":{"device_type":"desktop","variant":"control"}}',
    uuid4(), uuid4(), site, types[(counter % #types) + 1], counter % 50)
  return wrk.format("POST", "/v1/events/track",
    { ["Content-Type"] = "text/plain", ["Origin"] = "https://news.example.com" }, body)
end

function delay()
  return delay_ms
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f errors=%d non2xx=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
