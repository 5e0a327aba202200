"""Word lists and sentence templates for the synthetic registry.

Every string here was written for this project; none is taken from a real catalog. Templates use
str.format slots filled by bench_data.prose:

    {res} {ress} {Res}    resource noun, its plural, capitalised; {a_res} with its article
    {res2} {ress2}        a second resource of the same domain
    {parent} {parents}    the container a resource lives in; {Parent}, {a_parent}
    {prod}                the product's display name (a substitution marker, see catalogs.py)
    {slug}                the product slug (a substitution marker)
    {f1} {f2} {f3}        fields of a resource
    {p1} {p2} {P1}        parameter names of the tool being described
    {other}               the name of a sibling tool
    {n} {lo} {hi}         numbers
    {ver}                 a version number like 2.4.1
    {dv}                  a default value as written in prose
    {verb} {Verb} {verb_lower}   the tool's verb, and its third person ("Lists", "lists")
"""

from __future__ import annotations

from dataclasses import dataclass

# Invented vendor names: short, lower-case, ASCII, no separators (slugs are built from them).
VENDORS: tuple[str, ...] = (
    "acorn", "alder", "amberline", "anvil", "aperture", "arclight", "basalt", "beacon", "birchway",
    "bluefin", "boulder", "brightfield", "cairn", "canopy", "cedarpoint", "cinder", "cobalt",
    "copperleaf", "cormorant", "driftwood", "ember", "fernhill", "fjord", "flint", "foxglove",
    "glacier", "granite", "harbor", "heron", "hollow", "indigo", "juniper", "kestrel", "lantern",
    "larch", "lumen", "maple", "meridian", "mosaic", "nimbus", "northwind", "oakridge", "obsidian",
    "orchard", "osprey", "pebble", "pinecrest", "quarry", "quill", "ravine", "redwood", "saffron",
    "sandpiper", "sequoia", "silverline", "slate", "sparrow", "summit", "tallow", "thistle",
    "timber", "tundra", "umber", "vantage", "verdant", "willow", "wren", "yarrow", "zephyr",
)

# Each domain: product words, resources, the container they live in, fields of a resource.
@dataclass(frozen=True)
class Domain:
    key: str
    products: tuple[str, ...]
    resources: tuple[tuple[str, str], ...]  # (singular, plural)
    parent: tuple[str, str]
    fields: tuple[str, ...]


DOMAINS: tuple[Domain, ...] = (
    Domain(
        key="code",
        products=("forge", "repohub", "codeyard", "gitway"),
        resources=(("issue", "issues"), ("pull request", "pull requests"),
                   ("branch", "branches"), ("commit", "commits"), ("release", "releases"),
                   ("label", "labels"),
                   ("review comment", "review comments"), ("workflow run", "workflow runs"),
                   ("tag", "tags"), ("milestone", "milestones"), ("discussion", "discussions")),
        parent=("repository", "repositories"),
        fields=("title", "state", "author", "created_at", "head_sha", "labels", "assignees",
                "body", "merge status", "html_url"),
    ),
    Domain(
        key="tickets",
        products=("helpdesk", "tracker", "triage", "caseboard"),
        resources=(("ticket", "tickets"), ("comment", "comments"), ("agent", "agents"),
                   ("queue", "queues"), ("macro", "macros"), ("attachment", "attachments"),
                   ("SLA policy", "SLA policies")),
        parent=("workspace", "workspaces"),
        fields=("priority", "status", "requester", "due date", "channel", "satisfaction score",
                "tags", "assignee"),
    ),
    Domain(
        key="storage",
        products=("vault", "bucketry", "filebox", "drive"),
        resources=(("file", "files"), ("folder", "folders"), ("share link", "share links"),
                   ("object", "objects"), ("version", "versions"),
                   ("upload session", "upload sessions")),
        parent=("bucket", "buckets"),
        fields=("size", "checksum", "mime type", "modified time", "owner", "storage class",
                "etag", "path"),
    ),
    Domain(
        key="database",
        products=("querydeck", "tablewise", "rowstore", "sqlbay"),
        resources=(("table", "tables"), ("row", "rows"), ("index", "indexes"), ("view", "views"),
                   ("query", "queries"), ("migration", "migrations"), ("snapshot", "snapshots"),
                   ("column", "columns")),
        parent=("database", "databases"),
        fields=("row count", "schema", "primary key", "collation", "engine", "comment",
                "last vacuum", "size on disk"),
    ),
    Domain(
        key="calendar",
        products=("calendar", "agenda", "schedulr", "timeslot"),
        resources=(("event", "events"), ("attendee", "attendees"), ("calendar", "calendars"),
                   ("reminder", "reminders"), ("room", "rooms"), ("availability window",
                   "availability windows")),
        parent=("account", "accounts"),
        fields=("start time", "end time", "time zone", "location", "organizer", "recurrence",
                "conference link", "visibility"),
    ),
    Domain(
        key="chat",
        products=("chatter", "relay", "huddle", "channelz"),
        resources=(("message", "messages"), ("channel", "channels"), ("thread", "threads"),
                   ("reaction", "reactions"), ("member", "members"), ("bookmark", "bookmarks"),
                   ("scheduled message", "scheduled messages")),
        parent=("team", "teams"),
        fields=("text", "sender", "timestamp", "reply count", "permalink", "edited flag",
                "mentions"),
    ),
    Domain(
        key="payments",
        products=("ledger", "paydesk", "billing", "invoicer"),
        resources=(("invoice", "invoices"), ("customer", "customers"),
                   ("payment", "payments"), ("refund", "refunds"),
                   ("subscription", "subscriptions"), ("coupon", "coupons"),
                   ("payout", "payouts"), ("tax rate", "tax rates")),
        parent=("merchant account", "merchant accounts"),
        fields=("amount", "currency", "status", "due date", "customer email", "line items",
                "balance", "created timestamp"),
    ),
    Domain(
        key="geo",
        products=("atlas", "mapkit", "geofind", "routeplan"),
        resources=(("place", "places"), ("route", "routes"), ("geofence", "geofences"),
                   ("tile", "tiles"), ("address", "addresses"), ("elevation sample",
                   "elevation samples")),
        parent=("map project", "map projects"),
        fields=("latitude", "longitude", "bounding box", "postal code", "country code",
                "distance", "travel time"),
    ),
    Domain(
        key="weather",
        products=("skycast", "forecaster", "climatic", "windvane"),
        resources=(("forecast", "forecasts"), ("observation", "observations"),
                   ("alert", "alerts"), ("station", "stations"),
                   ("air quality reading", "air quality readings")),
        parent=("region", "regions"),
        fields=("temperature", "humidity", "wind speed", "precipitation", "pressure",
                "UV index", "visibility"),
    ),
    Domain(
        key="browser",
        products=("webpilot", "crawler", "pagegrab", "headless"),
        resources=(("page", "pages"), ("tab", "tabs"), ("element", "elements"),
                   ("screenshot", "screenshots"), ("cookie", "cookies"), ("network request",
                   "network requests")),
        parent=("browser session", "browser sessions"),
        fields=("URL", "title", "status code", "selector", "viewport", "load time",
                "console output"),
    ),
    Domain(
        key="ci",
        products=("pipeline", "buildbot", "shipyard", "deployer"),
        resources=(("build", "builds"), ("job", "jobs"), ("artifact", "artifacts"),
                   ("deployment", "deployments"), ("environment", "environments"),
                   ("secret", "secrets"), ("runner", "runners")),
        parent=("project", "projects"),
        fields=("status", "duration", "commit", "trigger", "exit code", "log URL", "started at"),
    ),
    Domain(
        key="monitoring",
        products=("watchtower", "pulse", "telemetry", "oncall"),
        resources=(("alert rule", "alert rules"), ("incident", "incidents"),
                   ("metric", "metrics"), ("dashboard", "dashboards"),
                   ("log entry", "log entries"), ("trace", "traces"), ("monitor", "monitors")),
        parent=("service", "services"),
        fields=("severity", "threshold", "last triggered", "owner team", "query", "p95 latency",
                "error rate"),
    ),
    Domain(
        key="science",
        products=("genebank", "protbase", "assaylab", "cheminfo"),
        resources=(("gene", "genes"), ("protein", "proteins"), ("compound", "compounds"),
                   ("assay", "assays"), ("variant", "variants"), ("pathway", "pathways"),
                   ("publication", "publications")),
        parent=("dataset", "datasets"),
        fields=("accession", "organism", "sequence length", "molecular weight", "synonyms",
                "evidence level", "cross references"),
    ),
    Domain(
        key="docs",
        products=("wiki", "notebook", "docspace", "pagebook"),
        resources=(("document", "documents"), ("page", "pages"), ("block", "blocks"),
                   ("comment", "comments"), ("template", "templates"), ("space", "spaces")),
        parent=("workspace", "workspaces"),
        fields=("title", "last editor", "word count", "parent page", "permissions", "tags",
                "revision"),
    ),
    Domain(
        key="mail",
        products=("mailroom", "inboxer", "postbox", "sendwell"),
        resources=(("email", "emails"), ("draft", "drafts"), ("mailbox", "mailboxes"),
                   ("contact", "contacts"), ("filter rule", "filter rules"), ("attachment",
                   "attachments")),
        parent=("mail account", "mail accounts"),
        fields=("subject", "sender", "recipients", "received at", "snippet", "thread ID",
                "flags"),
    ),
    Domain(
        key="commerce",
        products=("storefront", "catalog", "cartly", "shopline"),
        resources=(("product", "products"), ("order", "orders"), ("variant", "variants"),
                   ("collection", "collections"), ("shipment", "shipments"),
                   ("review", "reviews"), ("discount", "discounts")),
        parent=("store", "stores"),
        fields=("SKU", "price", "stock level", "fulfillment status", "weight", "vendor",
                "published at"),
    ),
    Domain(
        key="media",
        products=("pixelbox", "imagery", "framecut", "chartmaker"),
        resources=(("image", "images"), ("video", "videos"), ("chart", "charts"),
                   ("thumbnail", "thumbnails"), ("caption", "captions"),
                   ("palette", "palettes")),
        parent=("album", "albums"),
        fields=("width", "height", "format", "duration", "dominant color", "alt text",
                "file size"),
    ),
)

# Verb: (third person, gerund, past participle). Order matters only for determinism.
VERBS: dict[str, tuple[str, str, str]] = {
    "list": ("Lists", "Listing", "listed"),
    "get": ("Gets", "Getting", "fetched"),
    "search": ("Searches", "Searching", "searched"),
    "create": ("Creates", "Creating", "created"),
    "update": ("Updates", "Updating", "updated"),
    "delete": ("Deletes", "Deleting", "deleted"),
    "archive": ("Archives", "Archiving", "archived"),
    "restore": ("Restores", "Restoring", "restored"),
    "export": ("Exports", "Exporting", "exported"),
    "import": ("Imports", "Importing", "imported"),
    "sync": ("Syncs", "Syncing", "synced"),
    "validate": ("Validates", "Validating", "validated"),
    "preview": ("Previews", "Previewing", "previewed"),
    "count": ("Counts", "Counting", "counted"),
    "summarize": ("Summarizes", "Summarizing", "summarized"),
    "move": ("Moves", "Moving", "moved"),
    "copy": ("Copies", "Copying", "copied"),
    "rename": ("Renames", "Renaming", "renamed"),
    "assign": ("Assigns", "Assigning", "assigned"),
    "tag": ("Tags", "Tagging", "tagged"),
    "watch": ("Watches", "Watching", "watched"),
    "render": ("Renders", "Rendering", "rendered"),
    "convert": ("Converts", "Converting", "converted"),
    "run": ("Runs", "Running", "run"),
    "cancel": ("Cancels", "Cancelling", "cancelled"),
    "retry": ("Retries", "Retrying", "retried"),
    "schedule": ("Schedules", "Scheduling", "scheduled"),
    "upload": ("Uploads", "Uploading", "uploaded"),
    "download": ("Downloads", "Downloading", "downloaded"),
    "compare": ("Compares", "Comparing", "compared"),
    "approve": ("Approves", "Approving", "approved"),
}

# Verbs that read, used to bias the mix toward lookups as real catalogs are.
READ_VERBS: tuple[str, ...] = ("list", "get", "search", "count", "summarize", "preview", "export",
                               "compare", "download")

# First sentences: plain prose, deliberately free of rule words.
LEADS_BY_VERB: dict[str, tuple[str, ...]] = {
    "list": ("Lists the {ress} of {a_parent}, newest first.",
             "Returns a page of {ress} for the selected {parent}.",
             "Shows every {res} in {a_parent} together with its {f1} and {f2}.",
             "Enumerates {ress} in {prod} so the agent can pick one to work with."),
    "get": ("Fetches one {res} with its {f1}, {f2} and {f3}.",
            "Returns the full record of a single {res} from {prod}.",
            "Looks up {a_res} by its identifier and reports its current {f1}.",
            "Retrieves details about a specific {res} in {a_parent}."),
    "search": ("Searches {ress} across every {parent} you can see in {prod}.",
               "Runs a full-text search over {ress} and returns the best matches.",
               "Finds {ress} whose {f1} or {f2} match a free-text query.",
               "Queries the {prod} index for {ress} related to a keyword."),
    "create": ("Creates a new {res} in {a_parent}.",
               "Adds {a_res} to {prod} and returns its identifier.",
               "Opens a fresh {res} with the given {f1} and {f2}.",
               "Registers a new {res} under the chosen {parent}."),
    "update": ("Updates fields of an existing {res}.",
               "Changes the {f1} or {f2} of {a_res} in place.",
               "Edits {a_res}; fields left out of the request keep their current values.",
               "Applies a partial update to {a_res} in {prod}."),
    "delete": ("Deletes {a_res} from its {parent}.",
               "Removes {a_res} and everything attached to it.",
               "Permanently erases the selected {res} from {prod}."),
}

LEADS_GENERIC: tuple[str, ...] = (
    "{Verb} {a_res} in {prod}.",
    "{Verb} {ress} belonging to {a_parent}.",
    "{Verb} the selected {res}.",
    "{Verb} one or more {ress} in a single call.",
    "Helper that {verb_lower} {ress} for the current {parent}.",
    "{Verb} {a_res} on behalf of the signed-in user.",
)

# Extra prose sentences: context that a compressor may drop.
PROSE: tuple[str, ...] = (
    "The response includes the {f1}, the {f2} and a link to the {res} in the {prod} web app.",
    "Results come back in pages, newest first.",
    "Each {res} carries its own revision number, which changes on every edit.",
    "This is handy for dashboards, weekly reports and quick status checks.",
    "Large {ress} are summarized rather than returned in full.",
    "Timestamps in the result are expressed in UTC.",
    "The {f1} field is empty for {ress} created before the last migration.",
    "The call is served from a read replica that may lag a few seconds behind.",
    "Archived {ress} appear with a grey badge in the interface.",
    "It wraps the {prod} REST endpoint of the same name.",
    "Behind the scenes the request is retried once on a transient network error.",
    "The returned object mirrors what the {prod} dashboard shows on the {res} page.",
    "Counts are approximate for very large {parents}.",
    "Teams often run this first to get their bearings in an unfamiliar {parent}.",
    "The {f2} is computed on the server and may differ from what the client shows.",
    "Related {ress2} are included as lightweight references.",
    "Both public and private {ress} are covered, subject to the caller's permissions.",
    "The result is a JSON object with a list of {ress} and a pagination cursor.",
    "Responses are cached for a short while, so a fresh edit may take a moment to appear.",
    "Each entry has a stable identifier that other {prod} tools accept.",
    "The tool is safe to call repeatedly; it has no side effects on the {parent}.",
    "Extra metadata such as {f3} is attached when the {parent} has it enabled.",
    "Under the hood this maps to a single API request.",
    "Output is trimmed to keep the context window small.",
    "Empty {parents} produce an empty list rather than an error.",
    "The {prod} team added this endpoint to support agent workflows.",
)

# Rule sentences, grouped by the kind of rule they state.
RULES: dict[str, tuple[str, ...]] = {
    "obligation": (
        "You must pass the {p1} of an existing {parent}.",
        "The caller must have write access to the {parent}.",
        "The {p1} parameter is required whenever {p2} is set.",
        "This cannot be undone once the {res} is removed.",
        "Requests shall include a non-empty {p1}.",
        "Authentication is required; the token needs the {res}:read scope.",
        "Invalid {p1} values are rejected with a validation error.",
    ),
    "prohibition": (
        "Never include passwords or access tokens in the {p1} field.",
        "Do not call this tool in a loop to page through results; pass the cursor instead.",
        "The {res} does not need to be open for this to work.",
        "Do not guess identifiers: look them up first.",
        "Never retry a failed {verb} call without checking whether it already succeeded.",
    ),
    "limit": (
        "At most {n} {ress} are returned per call.",
        "Returns at least one {res} when the {parent} is not empty.",
        "The {p1} may be up to {n} characters long.",
        "Values between {lo} and {hi} are accepted.",
        "Requests that exceed {n} items per minute are throttled.",
        "The maximum page size is {n}; the minimum is 1.",
        "No more than {lo} {ress} can be changed in one request.",
        "Bodies larger than {n} KB are truncated.",
    ),
    "format": (
        "Timestamps use ISO 8601 format, for example 2024-03-09T14:05:00Z.",
        "Dates follow RFC 3339 with an explicit offset.",
        "The {p1} must be an absolute path such as /srv/{slug}/data.",
        "Identifiers match the pattern ^[a-z0-9-]+$.",
        "Colors are given in hex format like #1A2B3C.",
        "Durations are written in ISO 8601 form, e.g. PT15M.",
        "Currency amounts are integers in the smallest unit (cents), never floats.",
    ),
    "default": (
        "Defaults to {dv} when omitted.",
        "Optional, defaults to false.",
        "The default page size is 30.",
        "(Optional, default true)",
        "If no {p1} is given, the default {parent} of the token is used.",
        "Sorting is by {f1} by default.",
    ),
    "choice": (
        "Exactly one of {p1} or {p2} must be provided.",
        "{P1} and {p2} are mutually exclusive.",
        "Only {ress} in the open state are considered.",
        "The {p1} must be unique within its {parent}.",
        "Names are case-sensitive.",
        "The {p2} must be one of the values listed in its enum.",
        "Either {p1} or {p2} is needed, not both.",
    ),
    "warning": (
        "Warning: deleting {a_res} also removes its {ress2}.",
        "Deprecated: use {other} instead; this tool will be removed in v{ver}.",
        "Note: this operation is irreversible.",
        "Caution! Bulk changes run without a confirmation step.",
        "This tool is deprecated and kept for older clients.",
        "Beware that large {parents} can take minutes to scan.",
    ),
    "selection": (
        "Use this tool when the user asks for the {f1} of a specific {res}.",
        "Use this to find the {p1} before calling {other}.",
        "Do not use this for {ress2}; call {other} instead.",
        "Prefer {other} when you already know the {res} ID.",
        "Avoid calling this tool more than once per turn.",
        "You should confirm with the user before deleting anything.",
        "Should not be used for bulk exports.",
        "Use this tool for read-only lookups; it never modifies data.",
        "Use this instead of {other} when you need the {f2} as well.",
        "Do not use this tool for {ress} in archived {parents}.",
    ),
}

# Sentences whose punctuation is easy to split wrongly. Some state rules, some do not.
TRICKY: tuple[str, ...] = (
    "Supports common filters, e.g. status, owner and label, in any combination.",
    "Accepts legacy identifiers (i.e. plain integers) as well as slugs.",
    "Sorting works on name, size, date, etc. and is stable across pages.",
    "Requires server version v{ver} or newer.",
    "Scores are scaled by 1.5 before ranking.",
    "Settings are read from config.json in the project root.",
    "See https://docs.{slug}.example.com/v2/{res}#filters for the full syntax.",
    "Files are staged under /srv/{slug}/tmp/ before upload.",
    "Pass a filter like `status:open AND owner:me` to narrow the list.",
    "Missing values are shown as \"n/a. unknown\" in the table.",
    "Week numbers follow the ISO convention vs. the U.S. one.",
    "Use dotted keys like `build.env.PATH` to address nested settings.",
    "Works with U.K. and E.U. postal formats.",
    "Wildcards are allowed: \"*.log\" matches every log file.",
    "Why the wait? The index refreshes every 30 s.",
    "Version 2.0 of the API added the {f1} field.",
    "Each call costs about 0.25 credits.",
    "Mr. Lee's sample data set (see ./examples/demo.csv) is a good start.",
    "Call `{other}()` first. It returns the IDs this tool needs.",
    "The regex `^v\\d+\\.\\d+$` matches release names like v1.2.",
)

# Lines with non-ASCII text, for the servers that are partly localised.
LOCALIZED: tuple[str, ...] = (
    "返回匹配条件的记录列表。",
    "查询结果按时间倒序排列。",
    "该参数必须是有效的日期，格式为 YYYY-MM-DD。",
    "指定された項目の一覧を返します。",
    "結果は最大100件までです。",
    "Gibt die passenden Einträge zurück.",
    "Der Wert muss größer als 0 sein.",
    "Renvoie la liste des éléments correspondants.",
    "Le délai par défaut est de 30 secondes.",
    "Devuelve los registros que coinciden con la búsqueda.",
    "Temperatures are reported in °C unless the unit says otherwise.",
    "Prices are in € with two decimals.",
    "Values ≤ 0 are ignored — pass a positive number.",
    "Returns a summary → one line per {res}.",
    "“Smart quotes” in the {f1} are kept as they are.",
    "✅ marks finished {ress}; ⚠️ marks the ones that need attention.",
    "Ñandú, Łódź and Ærøskøbing are valid place names.",
)

# Multi-line blocks: bullet and numbered lists.
LIST_BLOCKS: tuple[str, ...] = (
    "Supported modes:\n- quick: scan the first page only\n- full: scan every {res}\n"
    "- diff: compare with the previous run",
    "Steps:\n1. Resolve the {parent}.\n2. Fetch matching {ress}.\n3. Return a short summary.",
    "Returned fields:\n* {f1}\n* {f2}\n* {f3}",
    "Tips:\n- Narrow the search with {p1}.\n- Do not pass both {p1} and {p2}.\n"
    "- Results are capped at {n} entries.",
    "Modes (pick one):\n  - `summary`: a short overview\n  - `full`: every field\n"
    "  - `ids`: identifiers only",
)

# Sentences swapped in when a pooled server is re-emitted under a new name (see catalogs.py).
# They go into JSON text without escaping, so they hold no quotes, backslashes or newlines.
VARIANTS: tuple[str, ...] = (
    "Provided by @@NAME@@.",
    "Part of the @@NAME@@ toolkit.",
    "Maintained by the @@NAME@@ integrations team.",
    "Available on every @@NAME@@ plan.",
    "First shipped in the @@NAME@@ public beta.",
    "Mirrors the behaviour of the @@NAME@@ command line client.",
    "Works with self-hosted @@NAME@@ installations too.",
    "Results are scoped to the @@NAME@@ tenant of the token.",
    "Needs a @@NAME@@ API key with read access.",
    "See the @@NAME@@ docs for field meanings.",
)

# Parameter-level phrases.
PARAM_FLAVOUR: tuple[str, ...] = (
    "Leave empty to include everything.",
    "Shown in the UI next to the {res}.",
    "Useful for narrowing large result sets.",
    "Matches are ranked by relevance.",
    "Kept as typed by the user.",
)

# Glosses for per-value lists in parameter descriptions.
ENUM_GLOSS: tuple[str, ...] = (
    "pick this for most requests",
    "slower, but covers every {res}",
    "kept for older clients; do not use in new code",
    "returns identifiers only",
    "requires admin rights on the {parent}",
    "the default for new {parents}",
    "same as the web app's view",
    "only valid together with {p1}",
    "sorted by {f1}, then by name",
)

OUTPUT_FIELDS: tuple[str, ...] = ("id", "name", "status", "url", "updated_at", "count", "items",
                                  "summary", "score", "owner")

LANGUAGES: tuple[str, ...] = ("en", "de", "fr", "ja", "zh-CN", "pt-BR", "es-419")
REGIONS: tuple[str, ...] = ("us-east-1", "eu-west-1", "ap-south-1", "sa-east-1")
MIME_TYPES: tuple[str, ...] = ("text/plain", "application/json", "text/csv", "image/png",
                               "application/vnd.api+json", "image/svg+xml")
AGGREGATES: tuple[str, ...] = ("count(*)", "sum(amount)", "avg(duration)", "max(score)", "(none)")
SORT_ORDERS: tuple[str, ...] = ("asc", "desc")
STATES: tuple[str, ...] = ("open", "closed", "all", "draft", "in_review")
