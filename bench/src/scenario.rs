//! The scenarios: which request wrk sends, as a wrk Lua script.

use std::path::Path;

use clap::ValueEnum;

use super::canned::FeedCursors;

/// One kind of request, sent over and over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Scenario {
    /// `GET /v1/pets?limit=20`.
    List20,
    /// `GET /v1/pets/{id}`, a random id of the dataset per request.
    GetById,
    /// `POST /v1/pets` with a small JSON body.
    Create,
    /// `POST /v1/pets` with the same body and a new `Idempotency-Key` per
    /// request: every request creates, through the idempotent path.
    CreateIdempotent,
    /// `GET /v1/pets?limit=100&status=available`.
    List100Available,
    /// `GET /v1/pets?status=pending&limit=20&after=ID`, `ID` 90 % into the
    /// catalogue: a page deep into one status.
    List20Deep,
    /// `POST /v1/store/orders`, each request for a different available
    /// animal (from a supply created before each run).
    PlaceOrder,
    /// The Store's everyday load: a fixed set of [`CYCLE_ANIMALS`] animals
    /// (made on each target once, at its warm-up, and kept through every
    /// round) ordered, cancelled and ordered again. Each request either
    /// places an order (`POST /v1/store/orders`) for one of the thread's
    /// animals that is available, or cancels (`PATCH
    /// /v1/store/orders/{id}`) an order the thread has just placed, which
    /// makes its animal available again; each `POST` and each `PATCH` is a
    /// request. The animals' orders accumulate round after round.
    OrderCycle,
    /// `GET /v1/store/inventory`.
    Inventory,
    /// `GET /v1/events?limit=20&after=ID`, `ID` the feed's first event
    /// (since contract 1.6.0; the seeding wrote one `pet.created` per pet).
    EventsPage,
    /// The same, `ID` an event about 90 % into the seeded feed.
    EventsPageDeep,
    /// `GET /v1/pets?limit=20&after=ID`, a random `ID` of the catalogue per
    /// request (up to 20 before its end): pages at any depth, each read
    /// about once when the catalogue is large: what [`Self::EventsPageRandom`]
    /// is set beside.
    List20Random,
    /// `GET /v1/events?limit=20&after=ID`, a random `ID` from the feed's
    /// first event to the deep page's cursor per request: feed pages at any
    /// depth, each read about once when the feed is large.
    EventsPageRandom,
}

/// The animals `order_cycle` orders again and again: a catalogue's share
/// that is ordered, cancelled and ordered again, as in issue 27's report.
/// wrk's threads split them (125 each), more than the 32 connections of a
/// thread can hold in flight at once.
pub const CYCLE_ANIMALS: usize = 250;

/// The body every `create` request sends.
pub const CREATE_BODY: &str = r#"{"name":"bench","categoryId":1,"status":"available"}"#;

impl Scenario {
    /// The name on the command line and in the results.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::List20 => "list20",
            Scenario::GetById => "get_by_id",
            Scenario::Create => "create",
            Scenario::CreateIdempotent => "create_idempotent",
            Scenario::List100Available => "list100_available",
            Scenario::List20Deep => "list20_deep",
            Scenario::PlaceOrder => "place_order",
            Scenario::OrderCycle => "order_cycle",
            Scenario::Inventory => "inventory",
            Scenario::EventsPage => "events_page",
            Scenario::EventsPageDeep => "events_page_deep",
            Scenario::List20Random => "list20_random",
            Scenario::EventsPageRandom => "events_page_random",
        }
    }

    /// Whether each run needs a supply of available animals on the target
    /// (a fresh one before each run for `place_order`; `order_cycle`'s
    /// fixed set, every one of them made available again).
    pub fn needs_supply(self) -> bool {
        matches!(self, Scenario::PlaceOrder | Scenario::OrderCycle)
    }

    /// Whether the scenario leaves the catalogue as it is (the scaling
    /// dataset runs only these).
    pub fn reads_only(self) -> bool {
        !matches!(
            self,
            Scenario::Create
                | Scenario::CreateIdempotent
                | Scenario::PlaceOrder
                | Scenario::OrderCycle
        )
    }

    /// Whether a plain pet store — one without keyset pagination or
    /// idempotency keys, such as the reference peers — serves this
    /// scenario's requests as the contract says (a peer comparison runs
    /// only these).
    pub fn plain(self) -> bool {
        !self.reads_feed()
            && !matches!(
                self,
                Scenario::CreateIdempotent | Scenario::List20Deep | Scenario::List20Random
            )
    }

    /// Whether the scenario reads the feed of events (which servers before
    /// contract 1.6.0 do not serve).
    pub fn reads_feed(self) -> bool {
        matches!(
            self,
            Scenario::EventsPage | Scenario::EventsPageDeep | Scenario::EventsPageRandom
        )
    }

    /// The page of pets a feed scenario is compared with: `list20`, or
    /// `list20_random` for pages at random cursors.
    pub fn pets_beside(self) -> Scenario {
        match self {
            Scenario::EventsPageRandom => Scenario::List20Random,
            _ => Scenario::List20,
        }
    }

    /// The wrk Lua script sending this scenario's requests with `key`, ids
    /// drawn from `1..=max_id` (or, for orders, from the file `supply`, one
    /// animal id per line; for the feed, after the event ids `feed`), and
    /// reporting through [`DONE_HOOK`].
    pub fn wrk_script(self, key: &str, max_id: i64, supply: &Path, feed: FeedCursors) -> String {
        let request = match self {
            Scenario::List20 => static_request("GET", "/v1/pets?limit=20"),
            Scenario::List100Available => {
                static_request("GET", "/v1/pets?limit=100&status=available")
            }
            Scenario::Create => format!(
                "{}wrk.headers[\"Content-Type\"] = \"application/json\"\n\
                 wrk.body = '{CREATE_BODY}'\n",
                static_request("POST", "/v1/pets")
            ),
            Scenario::CreateIdempotent => format!(
                "{}wrk.headers[\"Content-Type\"] = \"application/json\"\n\
                 wrk.body = '{CREATE_BODY}'\n{}",
                static_request("POST", "/v1/pets"),
                format_args!("{NUMBERED_THREADS}{IDEMPOTENT_REQUEST}")
            ),
            Scenario::GetById => random_request("/v1/pets/", 1, max_id),
            Scenario::List20Deep => static_request("GET", &deep_path(max_id)),
            Scenario::Inventory => static_request("GET", "/v1/store/inventory"),
            Scenario::PlaceOrder => orders_request(supply, PLACE_ORDER),
            Scenario::OrderCycle => orders_request(supply, ORDER_CYCLE),
            Scenario::EventsPage => static_request("GET", &events_path(feed.start)),
            Scenario::EventsPageDeep => static_request("GET", &events_path(feed.deep)),
            Scenario::List20Random => random_request(PETS_PREFIX, 0, (max_id - 20).max(0)),
            Scenario::EventsPageRandom => {
                random_request(EVENTS_PREFIX, feed.start as i64, feed.deep as i64)
            }
        };
        format!(
            "-- Written by `cargo xtask bench` for the {} scenario.\n\
             wrk.headers[\"Authorization\"] = \"Bearer {key}\"\n{request}{DONE_HOOK}",
            self.name()
        )
    }
}

/// The `list20_deep` request's path for a catalogue of ids `1..=max_id`.
pub fn deep_path(max_id: i64) -> String {
    format!("{DEEP_PREFIX}{}", max_id / 10 * 9)
}

/// The path of every `list20_deep` request, up to the cursor.
pub const DEEP_PREFIX: &str = "/v1/pets?status=pending&limit=20&after=";

/// The path of a feed scenario's request: the 20 events after `after`.
pub fn events_path(after: u64) -> String {
    format!("{EVENTS_PREFIX}{after}")
}

/// A fixed request: wrk formats it once and resends the same bytes, so the
/// client spends as little CPU as possible on it.
fn static_request(method: &str, path: &str) -> String {
    format!("wrk.method = \"{method}\"\nwrk.path = \"{path}\"\n")
}

/// Gives each wrk thread its number, `thread_number` (`setup` runs for each
/// thread before its `init`).
const NUMBERED_THREADS: &str = r#"local threads_started = 0
function setup(thread)
  threads_started = threads_started + 1
  thread:set("thread_number", threads_started)
end
"#;

/// `GET` of `prefix` and a new random number from `low..=high` per
/// request. Each wrk thread has its own Lua state, so each gets its own
/// seed (set from `setup`, which runs before `init`).
fn random_request(prefix: &str, low: i64, high: i64) -> String {
    format!(
        r#"{NUMBERED_THREADS}function init(args)
  math.randomseed(os.time() * 100 + thread_number)
end
function request()
  return wrk.format("GET", "{prefix}" .. math.random({low}, {high}))
end
"#
    )
}

/// `list20_random`'s path, up to its cursor.
pub const PETS_PREFIX: &str = "/v1/pets?limit=20&after=";

/// The path of every feed scenario's request, up to its cursor.
const EVENTS_PREFIX: &str = "/v1/events?limit=20&after=";

/// A new `Idempotency-Key` per request: a prefix random per thread and run,
/// and a counter. (`wrk.format` with headers of its own ignores
/// `wrk.headers`, so they are copied in.)
const IDEMPOTENT_REQUEST: &str = r#"function init(args)
  math.randomseed(os.time() * 100 + thread_number)
  prefix = string.format("bench-%d-%d-%d-", os.time(), thread_number, math.random(1, 1000000000))
  counter = 0
end
function request()
  counter = counter + 1
  local headers = {}
  for name, value in pairs(wrk.headers) do headers[name] = value end
  headers["Idempotency-Key"] = prefix .. counter
  return wrk.format("POST", "/v1/pets", headers, wrk.body)
end
"#;

/// An order script: JSON requests, each thread's share of the supply read
/// into the queue `free` (from `head` to `tail`), then `script`.
fn orders_request(supply: &Path, script: &str) -> String {
    format!(
        r#"wrk.headers["Content-Type"] = "application/json"
{NUMBERED_THREADS}-- wrk's thread count is the script's first argument (see wrk.rs).
function init(args)
  local threads = tonumber(args[1])
  free = {{}}
  head = 1
  tail = 0
  local n = 0
  for line in io.lines("{supply}") do
    if n % threads == thread_number - 1 then give_back(line) end
    n = n + 1
  end
  settle = {{}}
end
-- Puts an animal at the end of the queue of free ones.
function give_back(pet)
  tail = tail + 1
  free[tail] = pet
end
-- The next free animal. Once the queue is empty (the supply used up: too
-- small for the run), `place_order` orders its animals again from the
-- start, which a real server refuses with 409 and which fails the run;
-- `order_cycle` sends petId 0, refused with 422 (it never empties: a
-- thread's connections hold fewer animals than it has).
function next_free()
  if head > tail then
    if not wraps then return "0" end
    head = 1
  end
  local pet = free[head]
  head = head + 1
  return pet
end
function send(method, path, body)
  local headers = {{}}
  for name, value in pairs(wrk.headers) do headers[name] = value end
  return wrk.format(method, path, headers, body)
end
{script}"#,
        supply = supply.display()
    )
}

/// Each request orders the next animal of the supply.
const PLACE_ORDER: &str = r#"wraps = true
function request()
  return send("POST", "/v1/store/orders", '{"petId":' .. next_free() .. '}')
end
"#;

/// An order the thread has placed is cancelled by its next request (the
/// latest first); otherwise the request orders the next free animal. A
/// cancelled order's animal goes back to the end of the queue.
const ORDER_CYCLE: &str = r#"function request()
  local order = table.remove(settle)
  if order == nil then
    return send("POST", "/v1/store/orders", '{"petId":' .. next_free() .. '}')
  end
  return send("PATCH", "/v1/store/orders/" .. order, '{"status":"cancelled"}')
end
function response(status, headers, body)
  local order_status = body:match('"status":"(%a+)"')
  if order_status == "placed" then
    settle[#settle + 1] = body:match('"id":(%d+)')
  elseif order_status == "cancelled" then
    give_back(body:match('"petId":(%d+)'))
  end
end
"#;

/// Prints one machine-readable line when wrk is done: the request count,
/// latency percentiles (µs) and every kind of error. `status` counts the
/// responses wrk saw with a status of 400 or more (what its own summary calls
/// "Non-2xx or 3xx responses"); the API never answers 1xx or 3xx, and the
/// bench checks each scenario's status before it starts.
pub const DONE_HOOK: &str = r#"function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d bytes=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f " ..
    "max_us=%.0f non2xx=%d connect=%d read=%d write=%d timeout=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.status, e.connect, e.read, e.write, e.timeout))
end
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_scenarios_as_the_results_do() {
        for &scenario in Scenario::value_variants() {
            assert_eq!(Scenario::from_str(scenario.name(), false), Ok(scenario));
        }
    }

    const FEED: FeedCursors = FeedCursors {
        start: 7,
        deep: 9001,
    };

    #[test]
    fn scripts_carry_the_key_the_request_and_the_done_hook() {
        let script = Scenario::Create.wrk_script("k-1", 1000, Path::new("s"), FEED);
        assert!(script.contains("\"Bearer k-1\""));
        assert!(script.contains("wrk.method = \"POST\""));
        assert!(script.contains(CREATE_BODY));
        assert!(script.ends_with(DONE_HOOK));
        let script = Scenario::CreateIdempotent.wrk_script("k-1", 1000, Path::new("s"), FEED);
        assert!(script.contains("\"Bearer k-1\"") && script.contains(CREATE_BODY));
        assert!(script.contains("headers[\"Idempotency-Key\"] = prefix .. counter"));
        let script = Scenario::GetById.wrk_script("k", 1_000_000, Path::new("s"), FEED);
        assert!(script.contains("math.random(1, 1000000)"));
        let script = Scenario::List100Available.wrk_script("k", 1, Path::new("s"), FEED);
        assert!(script.contains("wrk.path = \"/v1/pets?limit=100&status=available\""));
        let script = Scenario::List20Deep.wrk_script("k", 1_000_000, Path::new("s"), FEED);
        assert!(script.contains("wrk.path = \"/v1/pets?status=pending&limit=20&after=900000\""));
        let script = Scenario::PlaceOrder.wrk_script("k", 1, Path::new("/tmp/supply.txt"), FEED);
        assert!(script.contains("io.lines(\"/tmp/supply.txt\")"));
        assert!(script.contains("\"/v1/store/orders\"") && script.ends_with(DONE_HOOK));
        let script = Scenario::OrderCycle.wrk_script("k", 1, Path::new("/tmp/supply.txt"), FEED);
        assert!(script.contains("function response(") && script.contains("\"PATCH\""));
        assert!(script.contains(r#"'{"status":"cancelled"}'"#) && !script.contains("delivered"));
        let script = Scenario::EventsPage.wrk_script("k", 1, Path::new("s"), FEED);
        assert!(script.contains("wrk.path = \"/v1/events?limit=20&after=7\""));
        let script = Scenario::EventsPageDeep.wrk_script("k", 1, Path::new("s"), FEED);
        assert!(script.contains("wrk.path = \"/v1/events?limit=20&after=9001\""));
        let script = Scenario::List20Random.wrk_script("k", 1000, Path::new("s"), FEED);
        assert!(
            script.contains(
                r#"wrk.format("GET", "/v1/pets?limit=20&after=" .. math.random(0, 980))"#
            )
        );
        let script = Scenario::EventsPageRandom.wrk_script("k", 1000, Path::new("s"), FEED);
        assert!(script.contains(
            r#"wrk.format("GET", "/v1/events?limit=20&after=" .. math.random(7, 9001))"#
        ));
    }

    #[test]
    fn only_our_own_server_serves_the_feed() {
        let feed: Vec<_> = Scenario::value_variants()
            .iter()
            .filter(|s| s.reads_feed())
            .collect();
        assert_eq!(
            feed,
            [
                &Scenario::EventsPage,
                &Scenario::EventsPageDeep,
                &Scenario::EventsPageRandom
            ]
        );
        assert!(feed.iter().all(|s| s.reads_only() && !s.plain()));
        let beside: Vec<_> = feed.iter().map(|s| s.pets_beside()).collect();
        assert_eq!(
            beside,
            [Scenario::List20, Scenario::List20, Scenario::List20Random]
        );
        assert!(!Scenario::List20Random.plain() && Scenario::List20Random.reads_only());
    }
}
