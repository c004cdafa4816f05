/**
 * The dispatcher's durable queue and its history, in the relational store: one `deliveries` row per (change event,
 * client) and one `delivery_attempts` row per HTTP attempt. Pending rows are the retry queue (they survive restarts);
 * a row is worked on by one dispatcher at a time (a lease: `locked_by`/`locked_until`, taken with SKIP LOCKED), and
 * only the oldest pending row of a (client, document) is eligible, which keeps per-document order per client. The
 * pending rows of each config are a queue of their own: a claim takes from every config's queue in turn, each up to
 * the number of rows the claimer lets that config have (CLAIM).
 */
import type { DeliveryView, Page } from "../../lib/contracts";
import { deliveryView } from "../../lib/deliveries";
import type { Migration, Relational } from "../../runtime/relational";

export const MIGRATIONS: Migration[] = [
	{
		version: 1,
		// `payload` is `json`, not `jsonb`: it keeps the event's text exactly (key order, \u0000), so the body posted on
		// every retry is byte-for-byte the change event; nothing queries inside it.
		up: `
			create table deliveries (
				id bigserial primary key,
				event_id text not null,
				seq bigint not null,
				client_id text not null,
				config_id text,
				url text,
				topic text not null,
				op text not null,
				document_id text not null,
				payload json not null,
				status text not null default 'pending' check (status in ('pending', 'delivered', 'failed', 'disabled')),
				attempts integer not null default 0,
				next_at timestamptz not null default now(),
				last_status integer,
				last_error text,
				locked_by text,
				locked_until timestamptz,
				created_at timestamptz not null default now(),
				updated_at timestamptz not null default now(),
				delivered_at timestamptz,
				unique (event_id, client_id)
			);
			create index deliveries_due on deliveries (next_at) where status = 'pending';
			create index deliveries_order on deliveries (client_id, topic, document_id, seq) where status = 'pending';
			create index deliveries_status_created on deliveries (status, created_at);
			create table delivery_attempts (
				id bigserial primary key,
				delivery_id bigint not null references deliveries (id) on delete cascade,
				attempt integer not null,
				url text,
				status integer,
				error text,
				duration_ms integer,
				at timestamptz not null default now()
			);
			create index delivery_attempts_delivery on delivery_attempts (delivery_id, attempt);
		`,
	},
	{
		version: 2,
		// Where each CQRS config came into being in the change stream (its creation event's position): a change of an
		// earlier position was written before the config existed and is not delivered to it, whatever the clocks say.
		up: `create table config_births (config_id text primary key, seq bigint not null, recorded_at timestamptz not null default now());`,
	},
	{
		version: 3,
		// Each config's pending rows in claim order (a row without a config is in the queue named ''): the claim finds the
		// configs that have pending rows by skipping along this index, and walks each one's queue from its head. `ts_ms`:
		// the change's time (the event's ts_ms), from which a delivery's lag is measured (null on rows queued before).
		up: `
			create index deliveries_queue on deliveries ((coalesce(config_id, '')), next_at, seq) where status = 'pending';
			drop index deliveries_due;
			alter table deliveries add column ts_ms bigint;
		`,
	},
	{
		version: 4,
		// A config's deliveries newest first (GET /context/configs/:id/deliveries, a page at a time from a `before` id):
		// one index walk per page, whatever the config's history.
		up: `create index deliveries_config on deliveries (config_id, id);`,
	},
];

/**
 * Every table MIGRATIONS creates, in an order their rows can be inserted in (a delivery before its attempts): a backup
 * holds these (data-backup.ts), and test/integration/backup.test.ts fails on a table of the platform missing here.
 */
export const TABLES = ["deliveries", "delivery_attempts", "config_births"];

export type DeliveryStatus = "pending" | "delivered" | "failed" | "disabled";

export interface NewDelivery {
	event_id: string;
	seq: number;
	/** The change event's ts_ms (the delivery's lag is measured from it). */
	ts_ms?: number;
	client_id: string;
	config_id: string | null;
	url: string | null;
	topic: string;
	op: string;
	document_id: string;
	/** The change event as JSON text. */
	body: string;
	status: "pending" | "disabled";
	last_error?: string | null;
}

export interface DeliveryRow {
	id: string;
	event_id: string;
	seq: string;
	client_id: string;
	config_id: string | null;
	url: string | null;
	topic: string;
	op: string;
	document_id: string;
	status: DeliveryStatus;
	attempts: number;
	next_at: Date;
	last_status: number | null;
	last_error: string | null;
	created_at: Date;
	delivered_at: Date | null;
}

/** A claimed row: what a delivery attempt and its settle need, with its payload as the exact JSON text to post. */
export interface ClaimedDelivery extends Pick<DeliveryRow, "id" | "event_id" | "client_id" | "config_id" | "url" | "attempts"> {
	body: string;
	/** The change's ts_ms (null on a row queued before it was recorded). */
	ts_ms: number | null;
}

export interface AttemptRecord {
	url: string | null;
	status: number | null;
	error: string | null;
	durationMs: number;
}

/**
 * A webhook URL as it may be stored, listed and logged: without `user:pass@` (a config may hold one; credentials
 * are never kept in the delivery history). Not a URL: kept as is, bounded.
 */
export function storableUrl(url: string | null | undefined): string | null {
	if (url === null || url === undefined) return null;
	let out = storable.get(url);
	if (out === undefined) {
		if (storable.size >= STORABLE_MAX) storable.clear();
		out = withoutUserinfo(url);
		storable.set(url, out);
	}
	return out;
}

/** storableUrl's answers for the URLs in use (a few: one per webhook), not parsed again on every settle. */
const storable = new Map<string, string>();
const STORABLE_MAX = 1000;

function withoutUserinfo(url: string): string {
	try {
		const u = new URL(url);
		if (!u.username && !u.password) return url;
		u.username = "";
		u.password = "";
		return u.toString();
	} catch {
		// Not parseable: drop anything up to an `@` before the first `/` after the scheme (userinfo-like).
		return String(url)
			.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#]*@/i, "$1")
			.slice(0, 2000);
	}
}

interface PendingSettle {
	row: ClaimedDelivery;
	owner: string;
	attempt: AttemptRecord | null;
	state: { status: DeliveryStatus; attempts: number; nextInSec?: number; configId?: string | null; lastError: string | null };
	resolve: () => void;
	reject: (err: unknown) => void;
}

/** Settles per statement (12 parameters each). */
const SETTLE_CHUNK = 200;
/**
 * A settle statement of up to this many rows is a prepared one (one per row count and connection, parsed and planned
 * once); a larger batch, rare (more than the deliveries a dispatcher has in flight), is sent as plain text.
 */
const PREPARED_SETTLE = 64;
const SETTLE_CASTS = ["bigint", "text", "text", "integer", "float8", "integer", "text", "text", "text", "boolean", "text", "integer"];
const settleTexts: string[] = [];

/** The settle statement for `n` rows (built once per row count). */
function settleText(n: number): string {
	let text = settleTexts[n];
	if (text) return text;
	const values = Array.from({ length: n }, (_, r) => `(${SETTLE_CASTS.map((c, i) => `$${r * SETTLE_CASTS.length + i + 1}::${c}`).join(", ")})`);
	text = `with v (id, owner, status, attempts, next_in, last_status, last_error, config_id, url, has_attempt, a_error, a_duration) as (values ${values.join(", ")}),
			 a as (insert into delivery_attempts (delivery_id, attempt, url, status, error, duration_ms)
				select id, attempts, url, last_status, a_error, a_duration from v where has_attempt)
			 update deliveries d set status = v.status, attempts = v.attempts, next_at = now() + make_interval(secs => v.next_in),
				last_status = case when v.has_attempt then v.last_status else d.last_status end, last_error = v.last_error, config_id = v.config_id, url = v.url,
				delivered_at = case when v.status = 'delivered' then now() else d.delivered_at end,
				locked_by = null, locked_until = null, updated_at = now()
			 from v where d.id = v.id and d.locked_by = v.owner`;
	if (n <= PREPARED_SETTLE) settleTexts[n] = text;
	return text;
}

/**
 * The claim stays a plain (unnamed) statement: planned on every call for the queue as it is then, never with a
 * generic plan cached on the connection. It runs in one transaction with the planner settings CLAIM_PLAN: claims come
 * in bursts, when the queue holds far more pending rows than the table's statistics say (autovacuum gathers them long
 * after the burst), and planned from those statistics a claim reads every due row, looks up each one's predecessor and
 * sorts them all before taking its `limit` (O(pending rows) per claim). With them the only plan left is the one along
 * the index deliveries_queue: the configs with pending rows found by skipping from one config to the next, and each
 * config's queue walked from its head, each row's predecessor looked up by index, stopping once that config's share is
 * taken. The cost is O(configs with pending rows + rows taken), whatever their backlog. The few rows taken are still
 * sorted (into turns): with sorts priced out by the settings, such a plan's cost would pass the JIT's threshold and
 * the server would compile it on every claim (seconds on a busy host), so JIT is off for the claim too.
 */
export const CLAIM_PLAN = `select ${["enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_hashjoin", "enable_mergejoin", "enable_material", "jit"].map((s) => `set_config('${s}', 'off', true)`).join(", ")}`;
/**
 * Fair across configs: each config's queue gives at most its share (`$5`, a JSON object of config id to a number of
 * rows, for the configs the claimer holds back; `$4` for every other config), its rows in (next_at, seq) order; then
 * the claim takes the first row of every config, then the second, ... (earliest due first within a round), up to
 * `$2`. So one config's backlog, however long, never stands in front of another config's rows. `$1` owner, `$3`
 * lease in seconds.
 */
export const CLAIM = `with recursive queues (q) as (
				(select coalesce(config_id, '') from deliveries where status = 'pending' order by coalesce(config_id, '') limit 1)
				union all
				select (select coalesce(n.config_id, '') from deliveries n where n.status = 'pending' and coalesce(n.config_id, '') > queues.q order by coalesce(n.config_id, '') limit 1)
				from queues where queues.q is not null
			 ),
			 shares (q, share) as (select q, coalesce(($5::jsonb ->> q)::integer, $4) from queues where q is not null),
			 taken as (
				select t.id from shares
				cross join lateral (
					select r.id, r.next_at, r.seq, row_number() over (order by r.next_at, r.seq) as turn from (
						select c.id, c.next_at, c.seq from deliveries c
						where coalesce(c.config_id, '') = shares.q and c.status = 'pending' and c.next_at <= now()
						  and (c.locked_until is null or c.locked_until < now())
						  and not exists (
							select 1 from deliveries e
							where e.status = 'pending' and e.client_id = c.client_id and e.topic = c.topic
							  and e.document_id = c.document_id and (e.seq < c.seq or (e.seq = c.seq and e.id < c.id))
						  )
						order by c.next_at, c.seq
						limit shares.share
						for update skip locked
					) r
				) t
				where shares.share > 0
				order by t.turn, t.next_at, t.seq
				limit $2
			 )
			 update deliveries d set locked_by = $1, locked_until = now() + make_interval(secs => $3), updated_at = now()
			 from taken where d.id = taken.id
			 returning d.id, d.event_id, d.client_id, d.config_id, d.url, d.attempts, d.payload::text as body, d.ts_ms::float8 as ts_ms`;
/** A prepared (named) statement: a lookup by primary key, parsed and planned once per connection. */
const RELEASE =
	"update deliveries set locked_by = null, locked_until = null, next_at = greatest(next_at, now() + make_interval(secs => $3)), updated_at = now() where id = $1 and locked_by = $2";

/** Rows per insert statement (12 parameters each, well under PostgreSQL's 65 535). */
const ENQUEUE_CHUNK = 500;

const COLUMNS = "id, event_id, seq, client_id, config_id, url, topic, op, document_id, status, attempts, next_at, last_status, last_error, created_at, delivered_at";

/** A row of `delivery_attempts` as `attempts` reads it. */
export interface AttemptRow {
	attempt: number;
	url: string | null;
	status: number | null;
	error: string | null;
	duration_ms: number;
	at: Date;
}

export class DeliveryStore {
	constructor(private db: Relational) {}

	/**
	 * Idempotent (the stream delivers at least once): a second insert of one (event, client) does nothing. One
	 * statement per ENQUEUE_CHUNK rows (a batch of the stream), not one per row.
	 */
	async enqueue(rows: NewDelivery[]): Promise<number> {
		let inserted = 0;
		for (let i = 0; i < rows.length; i += ENQUEUE_CHUNK) {
			const chunk = rows.slice(i, i + ENQUEUE_CHUNK);
			const params: unknown[] = [];
			const values = chunk.map((r) => {
				const at = params.length;
				params.push(r.event_id, r.seq, r.client_id, r.config_id, storableUrl(r.url), r.topic, r.op, r.document_id, r.body, r.status, r.last_error ?? null, r.ts_ms ?? null);
				return `($${at + 1}, $${at + 2}, $${at + 3}, $${at + 4}, $${at + 5}, $${at + 6}, $${at + 7}, $${at + 8}, $${at + 9}::json, $${at + 10}, $${at + 11}, $${at + 12})`;
			});
			const res = await this.db.query(
				`insert into deliveries (event_id, seq, client_id, config_id, url, topic, op, document_id, payload, status, last_error, ts_ms)
				 values ${values.join(", ")} on conflict (event_id, client_id) do nothing`,
				params,
			);
			inserted += res.rowCount ?? 0;
		}
		return inserted;
	}

	/**
	 * Takes up to `limit` due rows for `owner` for `leaseSec`: pending, due, not leased by a live worker, and the
	 * oldest pending row of their (client, document), so a later event never overtakes an earlier one. Fair across
	 * configs (CLAIM): at most `share` rows of one config, or what `shares` says for that config (keyed by config id,
	 * '' for rows without one; 0 holds the config back), taken from every config in turn.
	 */
	async claim(owner: string, limit: number, leaseSec: number, share = limit, shares: ReadonlyMap<string, number> = new Map()): Promise<ClaimedDelivery[]> {
		if (!Number.isInteger(limit) || !Number.isInteger(share) || !Number.isFinite(leaseSec)) throw new TypeError("claim: limit and share must be integers and leaseSec a number");
		for (const n of shares.values()) if (!Number.isInteger(n)) throw new TypeError("claim: every share must be an integer");
		// One round trip: the settings and the claim as one simple query, which PostgreSQL runs as one transaction
		// (the settings, local to it, end with it). A simple query has no parameters: the values are written in it.
		const client = await this.db.client();
		try {
			const values = [client.escapeLiteral(owner), String(limit), String(leaseSec), String(share), client.escapeLiteral(JSON.stringify(Object.fromEntries(shares)))];
			const res = (await client.query(`${CLAIM_PLAN}; ${CLAIM.replace(/\$([1-5])\b/g, (_, i: string) => values[Number(i) - 1])}`)) as unknown as Array<{ rows: ClaimedDelivery[] }>;
			return res[1].rows;
		} finally {
			client.release();
		}
	}

	/** Gives a leased row back without counting an attempt (stop, transient lookup failure). */
	async release(id: string, owner: string, delaySec = 0): Promise<void> {
		await this.db.query({ name: "dispatcher-release", text: RELEASE, values: [id, owner, delaySec] });
	}

	/** Leases a previous run of this node left behind (crash, kill): free them at start. */
	async releaseOwned(owner: string): Promise<number> {
		const r = await this.db.query("update deliveries set locked_by = null, locked_until = null where locked_by = $1 and status = 'pending'", [owner]);
		return r.rowCount ?? 0;
	}

	/**
	 * Records an attempt and the row's new state. The settles of deliveries finishing together go in one statement
	 * (at most SETTLE_CHUNK): those of the same turn of the event loop, and, while one statement runs, every settle
	 * arriving meanwhile, sent as the next one when it is done (one settle statement at a time per store: under load
	 * the batches grow instead of the statements). Each caller's promise settles with its own batch. `nextInSec`
	 * applies to a row still pending (due again after it).
	 */
	settle(
		row: ClaimedDelivery,
		owner: string,
		attempt: AttemptRecord | null,
		state: { status: DeliveryStatus; attempts: number; nextInSec?: number; configId?: string | null; lastError: string | null },
	): Promise<void> {
		return new Promise((resolve, reject) => {
			this.settling.push({ row, owner, attempt, state, resolve, reject });
			if (this.flushing) return;
			this.flushing = true;
			setImmediate(() => void this.flushSettles());
		});
	}

	private settling: PendingSettle[] = [];
	/** A flush is scheduled or running: it takes whatever is queued when its current statement is done. */
	private flushing = false;

	private async flushSettles(): Promise<void> {
		try {
			while (this.settling.length) {
				const batch = this.settling.splice(0, SETTLE_CHUNK);
				try {
					await this.settleMany(batch);
					for (const b of batch) b.resolve();
				} catch (err) {
					for (const b of batch) b.reject(err);
				}
			}
		} finally {
			this.flushing = false;
		}
	}

	/** One statement: the attempts inserted, the rows updated (only those still leased by their settler). */
	private async settleMany(batch: PendingSettle[]): Promise<void> {
		const params: unknown[] = [];
		for (const { row, owner, attempt, state } of batch)
			params.push(
				row.id,
				owner,
				state.status,
				state.attempts,
				state.nextInSec ?? 0,
				attempt?.status ?? null,
				state.lastError,
				state.configId === undefined ? row.config_id : state.configId,
				storableUrl(attempt?.url ?? row.url),
				!!attempt,
				attempt?.error ?? null,
				attempt ? Math.round(attempt.durationMs) : null,
			);
		const text = settleText(batch.length);
		await this.db.query(batch.length <= PREPARED_SETTLE ? { name: `dispatcher-settle-${batch.length}`, text, values: params } : text, params);
	}

	async get(id: string): Promise<DeliveryRow | null> {
		const { rows } = await this.db.query<DeliveryRow>(`select ${COLUMNS} from deliveries where id = $1`, [id]);
		return rows[0] ?? null;
	}

	async payload(id: string): Promise<unknown> {
		const { rows } = await this.db.query<{ payload: unknown }>("select payload from deliveries where id = $1", [id]);
		return rows[0]?.payload;
	}

	async list(filter: { status?: string; client_id?: string; document_id?: string; limit?: number }): Promise<DeliveryRow[]> {
		const where: string[] = [];
		const params: unknown[] = [];
		for (const k of ["status", "client_id", "document_id"] as const) {
			if (filter[k] === undefined) continue;
			params.push(filter[k]);
			where.push(`${k} = $${params.length}`);
		}
		params.push(Math.min(Math.max(filter.limit ?? 100, 1), 1000));
		const { rows } = await this.db.query<DeliveryRow>(
			`select ${COLUMNS} from deliveries ${where.length ? `where ${where.join(" and ")}` : ""} order by seq, id limit $${params.length}`,
			params,
		);
		return rows;
	}

	/**
	 * The deliveries of config `configId` made for client `clientId`, newest first: `limit` of them older than the
	 * delivery `before` (when given), as the public route shows them (DeliveryView: no payload, URL or lease).
	 */
	async page(configId: string, clientId: string, opts: { status?: DeliveryStatus; before?: string; limit: number }): Promise<Page<DeliveryView>> {
		const params: unknown[] = [configId, clientId, opts.limit + 1];
		let where = "config_id = $1 and client_id = $2";
		if (opts.status !== undefined) where += ` and status = $${params.push(opts.status)}`;
		if (opts.before !== undefined) where += ` and id < $${params.push(opts.before)}`;
		const { rows } = await this.db.query<DeliveryRow>(`select ${COLUMNS} from deliveries where ${where} order by id desc limit $3`, params);
		const more = rows.length > opts.limit;
		const items = rows.slice(0, opts.limit).map(deliveryView);
		return { items, next: more ? items[items.length - 1].id : null };
	}

	async attempts(deliveryId: string): Promise<AttemptRow[]> {
		const { rows } = await this.db.query<AttemptRow>("select attempt, url, status, error, duration_ms, at from delivery_attempts where delivery_id = $1 order by attempt, id", [
			deliveryId,
		]);
		return rows;
	}

	/**
	 * Puts failed/disabled rows back in the queue with a fresh retry schedule (attempt history is kept), for the
	 * client's webhook `to` (its current config) when given: a delivery is retried on the config it names only.
	 */
	async requeue(where: { id?: string; client_id?: string }, to?: { configId: string; url: string | null }): Promise<DeliveryRow[]> {
		const byId = where.id !== undefined;
		const { rows } = await this.db.query<DeliveryRow>(
			`update deliveries set status = 'pending', attempts = 0, next_at = now(), last_error = null, locked_by = null, locked_until = null, updated_at = now(),
				config_id = coalesce($2, config_id), url = case when $2::text is null then url else $3 end
			 where ${byId ? "id = $1" : "client_id = $1"} and status in ('failed', 'disabled')
			 returning ${COLUMNS}`,
			[byId ? where.id : where.client_id, to?.configId ?? null, storableUrl(to?.url)],
		);
		return rows;
	}

	/** Records where CQRS configs came into being (stream positions); a later one of a config wins. Idempotent. */
	async recordBirths(births: Array<{ configId: string; seq: number }>): Promise<void> {
		if (!births.length) return;
		// One row per config (an upsert cannot touch a row twice): its latest birth in the batch.
		const latest = new Map<string, number>();
		for (const b of births) latest.set(b.configId, Math.max(b.seq, latest.get(b.configId) ?? b.seq));
		await this.db.query(
			`insert into config_births (config_id, seq) select * from unnest($1::text[], $2::bigint[])
			 on conflict (config_id) do update set seq = greatest(config_births.seq, excluded.seq)`,
			[[...latest.keys()], [...latest.values()]],
		);
	}

	/** The stream position where a CQRS config came into being, if the dispatcher has met it. */
	async birthOf(configId: string): Promise<number | undefined> {
		const { rows } = await this.db.query<{ seq: string }>({ name: "dispatcher-birth", text: "select seq from config_births where config_id = $1", values: [configId] });
		return rows.length ? Number(rows[0].seq) : undefined;
	}

	async counts(): Promise<Record<DeliveryStatus, number>> {
		const { rows } = await this.db.query<{ status: DeliveryStatus; n: string }>("select status, count(*) as n from deliveries group by status");
		const out: Record<DeliveryStatus, number> = { pending: 0, delivered: 0, failed: 0, disabled: 0 };
		for (const r of rows) out[r.status] = Number(r.n);
		return out;
	}
}
