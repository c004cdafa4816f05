/**
 * dispatcher (4010): routes change events to client webhooks through a durable retry queue.
 *
 * For each change event and each client id in its `clients`, the client's live CQRS config (context/configs,
 * `key: CQRS`, `eid`: client id) gives the webhook; a `deliveries` row is queued in the relational store (idempotent
 * per event and client, so stream redelivery adds nothing) and the stream moves on. The scheduler then posts the
 * event (the spec's payload, exactly) with the config's `Authorization` and a Standard Webhooks signature when the
 * config has a `secret`, retrying on the schedule WEBHOOK_RETRY_SCHEDULE with ±20 % jitter, always on the config it was
 * made for (disabled, deleted or replaced by another: the delivery ends `disabled`). A change written before its
 * config existed (an earlier stream position than the config's creation) is not delivered to it. A failing webhook is
 * logged at info level from its first failure, once per config per minute. 2xx = delivered; 410 =
 * the config is disabled; the last failed attempt fails the delivery and disables the config; a webhook host that
 * resolves to a non-public address is refused (no request) unless WEBHOOK_ALLOW_PRIVATE=1. Per client, the events of
 * one document are delivered in order (only the oldest pending delivery of a (client, document) is eligible); events
 * of different documents go in parallel. Fair across configs: each config's deliveries are a queue of their own, a claim
 * takes from every queue in turn, a config has at most PER_CONFIG deliveries in flight per dispatcher, and a config
 * whose webhook failed BREAKER_AFTER times in a row is held back alone (its circuit breaker: workers/dispatcher/fairness.ts),
 * so one tenant's failing or slow webhook does not delay another's. Attempts, failures, delivery lag and breakers are
 * metrics per config (workers/dispatcher/metrics.ts). Pending deliveries survive restarts; several dispatchers share the
 * queue.
 *
 * Operator actions (REPL, `npm run repl`): `call dispatcher.deliveries --status failed`, `call dispatcher.delivery
 * --id 12`, `call dispatcher.replay --id 12` (or `--client_id <cid>` for all failed/disabled deliveries of a client).
 * A tenant reaches its own config's deliveries through the gateway (GET /context/configs/:id/deliveries and its
 * redeliver, services/context/deliveries.ts): `configDeliveries` and `replay` scoped to the config and client.
 * docs/webhooks.md has the receiver's side.
 */
import { CQRS_ACTIVE_ACTION, CQRS_CHANGED, CQRS_CONFIG_ACTION, type CqrsConfig, type DeliveryView, type Page } from "../lib/contracts";
import { Errors, type Context, type Service } from "moleculer";
import { isIP } from "net";
import { AddressRefused, resolveTarget, type ResolvedTarget } from "../runtime/address-guard";
import { configOf, type PlatformConfig } from "../runtime/config";
import { migrate, openRelational, releaseRelational, type Relational } from "../runtime/relational";
import type { OutboxRecord } from "../events/outbox";
import { Poster, type PostResult } from "./dispatcher/post";
import { webhookHeaders, webhookId } from "./dispatcher/signature";
import { DeliveryStore, MIGRATIONS, type AttemptRecord, type ClaimedDelivery, type DeliveryRow, type NewDelivery } from "./dispatcher/store";
import { ConfigShares, type BreakerChange } from "./dispatcher/fairness";
import { WebhookMetrics, type FailureReason } from "./dispatcher/metrics";
import type { Consumer } from "../events/stream";
import { workerService } from "./worker";
import { nap } from "../runtime/nap";
import { errorText } from "../runtime/pg-process";

export const DISPATCHER_PORT = 4010;
/** Deliveries in flight at once per dispatcher (different documents or clients). */
const CONCURRENCY = 64;
/**
 * Deliveries of one config in flight at once per dispatcher: a config with a backlog (or a slow webhook) leaves the
 * other slots to the other configs.
 */
export const PER_CONFIG = 16;
/** Failed attempts in a row after which a config's circuit breaker opens (workers/dispatcher/fairness.ts). */
export const BREAKER_AFTER = 5;
/** The longest an open breaker holds a config back before a probe (also at most the retry schedule's longest delay). */
const BREAKER_MAX_MS = 300_000;
/**
 * Finished deliveries ask the queue for more in batches, not one claim query per delivery: once half of their config's
 * bound is free, or, while every slot was taken (a claim left due rows behind), once this many slots are free. New
 * deliveries (and the poll) ask at once, whatever is free: a config with nothing in flight gets its first slot without
 * waiting for a batch.
 */
const CLAIM_AT = 16;
/** Change events the dispatcher takes from the stream at once (their deliveries queued in one statement). */
const BATCH = 200;
/** How often an idle scheduler looks for due retries (new events and finished deliveries wake it at once). */
const POLL_MS = 200;
/** Bound of one webhook request, connection to last byte. */
export const REQUEST_TIMEOUT_MS = 10_000;
/** A claimed delivery belongs to its dispatcher this long; a crashed dispatcher's deliveries are taken over after it. */
const LEASE_SEC = 60;
/** Safety net behind the CQRS_CHANGED broadcast and the stream's own config events. */
const CONFIG_TTL_MS = 30_000;
const NO_CONFIG_TTL_MS = 1_000;
const JITTER = 0.2;
/** A failing webhook is logged once per config per this long. */
const FAILING_LOG_MS = 60_000;
/** Configs whose creation position (or last failure log) is remembered in memory; past this the memory starts again. */
const REMEMBERED = 10_000;

/** Seconds before the next attempt after `attemptsDone` attempts, jittered ±20 %; undefined when none is left. */
export function retryDelay(schedule: readonly number[], attemptsDone: number, random: () => number = Math.random): number | undefined {
	if (attemptsDone >= schedule.length) return undefined;
	return schedule[attemptsDone] * (1 + (random() * 2 - 1) * JITTER);
}

/** One id per change event (stream positions are unique per outbox; the document and op make it unique across nodes). */
export function eventIdOf(rec: OutboxRecord): string {
	return `${rec.seq}:${rec.event.id}:${rec.event.op}`;
}

/** Webhook URLs whose host is an IP literal, checked (no DNS involved: the answer cannot change); emptied past this. */
const LITERAL_TARGETS = 1000;

const isOk = (status: number | null) => status !== null && status >= 200 && status < 300;
const webhookOf = (c: CqrsConfig) => (typeof c.value.webhook === "string" ? c.value.webhook : null);
const reasonOf = (c: CqrsConfig) => (typeof c.value.disabled_reason === "string" ? `: ${c.value.disabled_reason}` : "");

interface State {
	cfg: PlatformConfig;
	owner: string;
	cache: Map<string, { at: number; p: Promise<CqrsConfig | null>; ttl: number }>;
	/** Stream position of each CQRS config's creation met so far (also in `config_births`). */
	births: Map<string, number>;
	/** When each failing config was last logged. */
	failingLogged: Map<string, number>;
	literals: Map<string, ResolvedTarget>;
	/** Resolutions under way, by URL: the attempts that start meanwhile share one DNS lookup. */
	resolving: Map<string, Promise<ResolvedTarget>>;
	shares: ConfigShares;
	metrics?: WebhookMetrics;
	inflight: Map<string, AbortController>;
	running: Set<Promise<void>>;
	poster: Poster;
	stopping: boolean;
	openP?: Promise<Relational>;
	readyP?: Promise<DeliveryStore>;
	db?: Relational;
	loop?: Promise<void>;
	wakeUp?: () => void;
	woken: boolean;
	/** The last claim took as many rows as there were free slots: more may be due. */
	starved: boolean;
	consumer?: Consumer;
}

type Svc = Service &
	State & {
		ready(): Promise<DeliveryStore>;
		configFor(eid: string): Promise<CqrsConfig | null>;
		targetOf(webhook: unknown): Promise<ResolvedTarget>;
		forget(eid: string): void;
		existedAt(config: CqrsConfig, rec: OutboxRecord): Promise<boolean>;
		logFailing(config: CqrsConfig, row: ClaimedDelivery, attempt: AttemptRecord, attempts: number, delay: number | undefined): void;
		breakerChanged(configId: string, clientId: string, change: BreakerChange | "closed"): void;
		wake(): void;
		disable(config: CqrsConfig, reason: string): Promise<void>;
		deliver(row: ClaimedDelivery, store: DeliveryStore, signal: AbortSignal): Promise<void>;
		schedule(): Promise<void>;
	};

/**
 * A batch of change events: the deliveries of all of them go to the queue in one statement, and each client's config
 * is looked up once (the cache, dropped by CQRS_CHANGED and by config events met in the batch, in stream order).
 * Idempotent per (event, client): a redelivered batch adds nothing.
 */
async function onChanges(this: Svc, recs: OutboxRecord[]): Promise<void> {
	const store = await this.ready();
	const rows: NewDelivery[] = [];
	const births: Array<{ configId: string; seq: number }> = [];
	for (const rec of recs) rows.push(...(await rowsOf.call(this, rec, births)));
	// Before the stream moves on: another dispatcher of the group (or this one restarted) reads them from there.
	await store.recordBirths(births);
	if (rows.length && (await store.enqueue(rows)) > 0) this.wake();
}

async function rowsOf(this: Svc, rec: OutboxRecord, births: Array<{ configId: string; seq: number }>): Promise<NewDelivery[]> {
	const ev = rec.event;
	// A CQRS config change reaches this stream in order: events written after it are routed with the new config even
	// when the CQRS_CHANGED broadcast has not arrived yet (another node). A config that becomes CQRS (created, or its
	// key changed) is born here: changes of earlier positions are not delivered to it.
	if (ev.topic === "context.configs") {
		for (const d of [ev.before, ev.after]) if (d && d.key === "CQRS" && typeof d.eid === "string") this.forget(d.eid);
		if (ev.after?.key === "CQRS" && ev.before?.key !== "CQRS") {
			if (this.births.size >= REMEMBERED) this.births.clear();
			this.births.set(ev.id, rec.seq);
			births.push({ configId: ev.id, seq: rec.seq });
		}
	}
	const clients = [...new Set((rec.clients ?? []).filter((c): c is string => typeof c === "string" && c.length > 0))];
	if (!clients.length) return [];
	const body = JSON.stringify(ev);
	const eventId = eventIdOf(rec);
	const rows: NewDelivery[] = [];
	for (const client of clients) {
		const config = await this.configFor(client);
		// No webhook registered (at the time of the change): nothing to deliver, nothing recorded. A new consumer group
		// starts at the beginning of the outbox: history from before a registration is not pushed to it.
		if (!config || !(await this.existedAt(config, rec))) continue;
		rows.push({
			event_id: eventId,
			seq: rec.seq,
			ts_ms: ev.ts_ms,
			client_id: client,
			config_id: config.id,
			url: webhookOf(config),
			topic: ev.topic,
			op: ev.op,
			document_id: ev.id,
			body,
			// Recorded even while the config is disabled, so that an operator can replay it once it is fixed.
			status: config.active ? "pending" : "disabled",
			last_error: config.active ? null : `config ${config.id} is inactive${reasonOf(config)}`,
		});
	}
	return rows;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export default workerService<Svc>(
	{
		name: "dispatcher",
		port: DISPATCHER_PORT,
		onChanges,
		maxBatch: BATCH,
		checks(this: Svc) {
			return { "relational store": async () => !!this.db && (await this.db.ping()) };
		},
	},
	{
		events: {
			[CQRS_CHANGED]: {
				context: true,
				handler(this: Svc, ctx: Context<{ eids?: string[] }>) {
					for (const eid of ctx.params?.eids ?? []) this.forget(eid);
				},
			},
		},
		actions: {
			/**
			 * Re-queues a failed or disabled delivery (`id`), or every failed/disabled delivery of a client (`client_id`
			 * alone), with a fresh retry schedule; the client's CQRS config is re-enabled first if it was disabled. With
			 * `id`, a `client_id` or `config_id` given too must be the delivery's, else it answers 404 as for no delivery
			 * (the gateway's redeliver route: a tenant replays its own config's deliveries only). Internal: the REPL and
			 * that route (REPLAY_ACTION).
			 */
			replay: {
				visibility: "public",
				params: { id: { type: "any", optional: true }, client_id: { type: "string", optional: true }, config_id: { type: "string", optional: true } },
				async handler(this: Svc, ctx: Context<{ id?: string | number; client_id?: string; config_id?: string }>) {
					const store = await this.ready();
					const { id, client_id, config_id } = ctx.params;
					if (id === undefined ? client_id === undefined || config_id !== undefined : false)
						throw new Errors.MoleculerClientError("give either id or client_id", 400, "BAD_REQUEST");
					let eids: string[];
					if (id !== undefined) {
						if (!/^\d{1,18}$/.test(String(id))) throw new Errors.MoleculerClientError("id must be a delivery id", 400, "BAD_REQUEST");
						const row = await store.get(String(id));
						if (!row || (client_id !== undefined && row.client_id !== client_id) || (config_id !== undefined && row.config_id !== config_id))
							throw new Errors.MoleculerClientError(`no delivery ${id}`, 404, "NOT_FOUND");
						if (row.status !== "failed" && row.status !== "disabled")
							throw new Errors.MoleculerClientError(`delivery ${id} is ${row.status}: only a failed or disabled delivery can be replayed`, 409, "CONFLICT");
						eids = [row.client_id];
					} else eids = [client_id!];
					// The client's current webhook (re-enabled if it was disabled): the replayed deliveries are made for it.
					let target: CqrsConfig | null = null;
					for (const eid of eids) {
						this.forget(eid);
						target = await this.configFor(eid);
						if (target && !target.active) {
							await ctx.call(CQRS_ACTIVE_ACTION, { id: target.id, active: true });
							this.forget(eid);
							this.logger.info(`dispatcher: CQRS config ${target.id} of client ${eid} re-enabled for a replay`);
						}
					}
					const rows = await store.requeue(id !== undefined ? { id: String(id) } : { client_id }, target ? { configId: target.id, url: webhookOf(target) } : undefined);
					// Another replay (or the REPL's) took the row between the check and the requeue: it is pending now.
					if (id !== undefined && !rows.length)
						throw new Errors.MoleculerClientError(`delivery ${id} is pending: only a failed or disabled delivery can be replayed`, 409, "CONFLICT");
					this.wake();
					return { requeued: rows.length, deliveries: rows };
				},
			},
			/** The deliveries of one config of one client, newest first (CONFIG_DELIVERIES_ACTION: the gateway's route). */
			configDeliveries: {
				visibility: "public",
				params: {
					config_id: "string",
					client_id: "string",
					status: { type: "enum", values: ["pending", "delivered", "failed", "disabled"], optional: true },
					before: { type: "string", pattern: /^\d{1,18}$/, optional: true },
					limit: { type: "number", integer: true, min: 1, max: 100 },
				},
				async handler(
					this: Svc,
					ctx: Context<{ config_id: string; client_id: string; status?: DeliveryRow["status"]; before?: string; limit: number }>,
				): Promise<Page<DeliveryView>> {
					const { config_id, client_id, ...opts } = ctx.params;
					return (await this.ready()).page(config_id, client_id, opts);
				},
			},
			/** Recorded deliveries, oldest event first: `status`, `client_id`, `document_id`, `limit` (≤ 1000). */
			deliveries: {
				visibility: "public",
				params: {
					status: { type: "enum", values: ["pending", "delivered", "failed", "disabled"], optional: true },
					client_id: { type: "string", optional: true },
					document_id: { type: "string", optional: true },
					limit: { type: "number", integer: true, positive: true, optional: true, convert: true },
				},
				async handler(this: Svc, ctx: Context<{ status?: string; client_id?: string; document_id?: string; limit?: number }>): Promise<DeliveryRow[]> {
					return (await this.ready()).list(ctx.params);
				},
			},
			/** One delivery with its payload and every attempt. */
			delivery: {
				visibility: "public",
				params: { id: { type: "any" } },
				async handler(this: Svc, ctx: Context<{ id: string | number }>) {
					const store = await this.ready();
					if (!/^\d{1,18}$/.test(String(ctx.params.id))) throw new Errors.MoleculerClientError("id must be a delivery id", 400, "BAD_REQUEST");
					const row = await store.get(String(ctx.params.id));
					if (!row) throw new Errors.MoleculerClientError(`no delivery ${ctx.params.id}`, 404, "NOT_FOUND");
					return { ...row, payload: await store.payload(row.id), attempts_list: await store.attempts(row.id) };
				},
			},
			/** Count of deliveries per status. */
			stats: {
				visibility: "public",
				async handler(this: Svc) {
					return (await this.ready()).counts();
				},
			},
		},
		methods: {
			ready(this: Svc): Promise<DeliveryStore> {
				if (this.stopping && !this.readyP) return Promise.reject(new Error("dispatcher is stopping"));
				this.openP ??= openRelational(this.cfg).then(
					(db) => (this.db = db),
					(err) => {
						this.openP = undefined;
						throw err;
					},
				);
				this.readyP ??= (async () => {
					const db = await this.openP!;
					await migrate(db, "dispatcher", MIGRATIONS);
					const store = new DeliveryStore(db);
					// Leases a previous run of this node held (killed mid-delivery) are given back at once.
					await store.releaseOwned(this.owner);
					return store;
				})();
				this.readyP.catch(() => (this.readyP = undefined));
				return this.readyP;
			},
			/** The client's live CQRS config (cached; the value holds secrets: never log it). */
			configFor(this: Svc, eid: string): Promise<CqrsConfig | null> {
				const hit = this.cache.get(eid);
				if (hit && Date.now() - hit.at < hit.ttl) return hit.p;
				const p = this.broker.call(CQRS_CONFIG_ACTION, { eid }) as Promise<CqrsConfig | null>;
				const entry = { at: Date.now(), p, ttl: CONFIG_TTL_MS };
				this.cache.set(eid, entry);
				// "No webhook" is kept briefly: a node that missed the CQRS_CHANGED broadcast must not skip a new
				// webhook's events for long. A found config is dropped by that broadcast (or after its TTL).
				p.then(
					(c) => c === null && (entry.ttl = NO_CONFIG_TTL_MS),
					() => this.cache.get(eid) === entry && this.cache.delete(eid),
				);
				return p;
			},
			/**
			 * The checked target of a webhook URL (runtime/address-guard: every check). A host name is resolved on every
			 * attempt, except that the attempts starting while one resolution of that URL is under way share its answer:
			 * a config's deliveries in flight together cost one DNS lookup, not one each (lookups run on libuv's few
			 * threads, which a failing resolver holds for seconds). A URL whose host is an IP literal gives the same answer
			 * each time and is kept.
			 */
			targetOf(this: Svc, webhook: unknown): Promise<ResolvedTarget> {
				const allowPrivate = this.cfg.webhookAllowPrivate;
				if (typeof webhook !== "string") return resolveTarget(webhook, allowPrivate);
				const key = `${allowPrivate ? "+" : "-"}${webhook}`;
				const hit = this.literals.get(key);
				if (hit) return Promise.resolve(hit);
				let p = this.resolving.get(key);
				if (p) return p;
				p = resolveTarget(webhook, allowPrivate).then((target) => {
					if (isIP(target.url.hostname.replace(/^\[(.*)\]$/, "$1"))) {
						if (this.literals.size >= LITERAL_TARGETS) this.literals.clear();
						this.literals.set(key, target);
					}
					return target;
				});
				this.resolving.set(key, p);
				const done = () => void (this.resolving.get(key) === p && this.resolving.delete(key));
				p.then(done, done);
				return p;
			},
			/**
			 * The client's config changed (or is about to be looked up afresh): dropped from the cache, and its circuit
			 * breaker closed: a changed config (a new URL, re-enabled, replayed) is tried again at once, not after the
			 * cooldown its former failures earned.
			 */
			forget(this: Svc, eid: string) {
				const hit = this.cache.get(eid);
				this.cache.delete(eid);
				hit?.p.then(
					(c) => c && this.shares.forget(c.id) && this.breakerChanged(c.id, eid, "closed"),
					() => undefined,
				);
			},
			/**
			 * Whether `config` existed when `rec` was written: the position of the config's creation in the stream, once
			 * met (here, or by any dispatcher: `config_births`), is at or before the change's. Not met: the change's time
			 * decides away from the config's `created_at` (stamped before the creation's hooks ran, so before it was
			 * written): earlier, the change is older; more than a creation can take later (twice REQUEST_TIMEOUT_MS, at
			 * least a minute), the config was written first (configs created before births were recorded). In between, a
			 * creation not met yet is still ahead in the stream: the change was written before the config existed.
			 */
			async existedAt(this: Svc, config: CqrsConfig, rec: OutboxRecord): Promise<boolean> {
				const known = this.births.get(config.id);
				if (known !== undefined) return rec.seq >= known;
				const ts = rec.event.ts_ms;
				if (ts < config.since) return false;
				if (ts - config.since > Math.max(60_000, 2 * this.cfg.requestTimeoutMs)) return true;
				const born = await (await this.ready()).birthOf(config.id);
				if (born === undefined) return false;
				if (this.births.size >= REMEMBERED) this.births.clear();
				this.births.set(config.id, born);
				return rec.seq >= born;
			},
			/**
			 * A failed attempt, at info level: from a webhook's first failure, once per config per FAILING_LOG_MS; the line
			 * says when the config's circuit breaker holds its deliveries back.
			 */
			logFailing(this: Svc, config: CqrsConfig, row: ClaimedDelivery, attempt: AttemptRecord, attempts: number, delay: number | undefined) {
				const now = Date.now();
				if (now - (this.failingLogged.get(config.id) ?? 0) < FAILING_LOG_MS) return;
				if (this.failingLogged.size >= REMEMBERED) this.failingLogged.clear();
				this.failingLogged.set(config.id, now);
				const next = delay === undefined ? "no attempt left" : `next attempt in ${Math.round(delay)} s`;
				const breaker = this.shares.isOpen(row.config_id ?? "") ? `; circuit breaker open after ${BREAKER_AFTER} failures in a row: the config's deliveries wait` : "";
				this.logger.info(
					`dispatcher: webhook of CQRS config ${config.id} (client ${config.eid}) is failing: ${attempt.error} (delivery ${row.id}, attempt ${attempts}; ${next}${breaker})`,
				);
			},
			/**
			 * A config's breaker opened or closed: its gauge, and a closing at info level (an opening shows in the failing
			 * config's next log line: logFailing).
			 */
			breakerChanged(this: Svc, configId: string, clientId: string, change: BreakerChange | "closed") {
				if (change === "reopened" || change === undefined) return;
				this.metrics?.circuit(configId, clientId, change === "opened");
				if (change === "closed") this.logger.info(`dispatcher: circuit breaker of CQRS config ${configId} (client ${clientId}) closed: its deliveries go again`);
			},
			wake(this: Svc) {
				this.woken = true;
				this.wakeUp?.();
			},
			async disable(this: Svc, config: CqrsConfig, reason: string) {
				try {
					await this.broker.call(CQRS_ACTIVE_ACTION, { id: config.id, active: false, reason });
					this.logger.warn(`dispatcher: CQRS config ${config.id} of client ${config.eid} disabled: ${reason}`);
				} catch (err) {
					this.logger.error(`dispatcher: could not disable CQRS config ${config.id} of client ${config.eid}: ${errorText(err)}`);
				}
				this.forget(config.eid);
			},
			async deliver(this: Svc, row: ClaimedDelivery, store: DeliveryStore, signal: AbortSignal) {
				const schedule = this.cfg.webhookRetrySchedule;
				const key = row.config_id ?? "";
				let config: CqrsConfig | null;
				try {
					config = await this.configFor(row.client_id);
				} catch {
					// The context service is unreachable: not the receiver's fault, no attempt counted.
					await store.release(row.id, this.owner, 1);
					return;
				}
				/** Nothing goes to this config any more: its breaker, if open, no longer holds back its deliveries (they end the same way). */
				const closeBreaker = () => {
					if (this.shares.forget(key)) this.breakerChanged(key, row.client_id, "closed");
				};
				/** Ends the delivery without an attempt. */
				const end = (state: { configId?: string; lastError: string }) => {
					closeBreaker();
					return store.settle(row, this.owner, null, { status: "disabled", attempts: row.attempts, ...state });
				};
				if (!config) return end({ lastError: `config ${row.config_id} is gone: the client has no CQRS config any more` });
				// Retries stay on the config the delivery was made for: one the client no longer uses (disabled, deleted or
				// replaced by a newer one) ends it, rather than sending it to another config (an operator may replay it).
				if (row.config_id !== null && config.id !== row.config_id)
					return end({ lastError: `config ${row.config_id} is no longer the client's webhook (disabled, deleted or replaced by config ${config.id})` });
				if (!config.active) return end({ configId: config.id, lastError: `config ${config.id} is inactive${reasonOf(config)}` });
				const url = webhookOf(config);
				const cfg = config;
				/** An attempt that ends the config (refused address, 410, no attempt left): recorded, the config disabled. */
				const final = async (attempt: AttemptRecord, status: "failed" | "disabled", lastError: string, reason: string) => {
					closeBreaker();
					await store.settle(row, this.owner, attempt, { status, attempts: row.attempts + 1, configId: cfg.id, lastError });
					await this.disable(cfg, reason);
				};
				const failed = async (attempt: AttemptRecord, why: FailureReason) => {
					this.metrics?.attempt(cfg.id, cfg.eid, why);
					const attempts = row.attempts + 1;
					const delay = retryDelay(schedule, attempts);
					if (delay !== undefined) this.breakerChanged(key, row.client_id, this.shares.failed(key, delay * 1000));
					this.logFailing(cfg, row, attempt, attempts, delay);
					if (delay === undefined) {
						const error = `gave up after ${attempts} attempts: ${attempt.error}`;
						return final(attempt, "failed", error, `delivery ${row.id} failed: ${error}`);
					}
					await store.settle(row, this.owner, attempt, { status: "pending", attempts, nextInSec: delay, configId: cfg.id, lastError: attempt.error });
				};
				let target;
				try {
					target = await this.targetOf(config.value.webhook);
				} catch (err) {
					const message = errorText(err);
					// A DNS failure is an ordinary failed attempt.
					if (!(err instanceof AddressRefused)) return failed({ url, status: null, error: `resolve: ${message}`, durationMs: 0 }, "dns");
					const error = `refused: ${message}`;
					this.logger.warn(`dispatcher: delivery ${row.id} of config ${config.id}: ${err.detail}`);
					this.metrics?.attempt(config.id, config.eid, "refused");
					return final({ url, status: null, error, durationMs: 0 }, "failed", error, `webhook ${error}`);
				}
				// The body's bytes, encoded once: signed and sent as they are.
				const body = Buffer.from(row.body);
				const headers = webhookHeaders({ id: webhookId(row.event_id, row.client_id), body, authorization: config.value.authorization, secret: config.value.secret });
				const res: PostResult = await this.poster.post(target, headers, body, signal);
				if (res.aborted) {
					await store.release(row.id, this.owner).catch(() => undefined);
					return;
				}
				const attempt: AttemptRecord = { url, status: res.status, error: res.error ?? (isOk(res.status) ? null : `HTTP ${res.status}`), durationMs: res.durationMs };
				if (isOk(res.status)) {
					this.metrics?.attempt(config.id, config.eid);
					if (row.ts_ms !== null) this.metrics?.delivered(config.id, config.eid, row.ts_ms);
					if (this.shares.succeeded(key)) this.breakerChanged(key, row.client_id, "closed");
					await store.settle(row, this.owner, attempt, { status: "delivered", attempts: row.attempts + 1, configId: config.id, lastError: null });
				} else if (res.status === 410) {
					this.metrics?.attempt(config.id, config.eid, "http");
					await final(attempt, "disabled", "webhook answered 410 Gone", `webhook answered 410 Gone (delivery ${row.id})`);
				} else await failed(attempt, res.status !== null ? "http" : /^timed out/.test(res.error ?? "") ? "timeout" : "network");
			},
			/** Claims due deliveries up to the concurrency bound and runs them; sleeps until woken or the next poll. */
			async schedule(this: Svc) {
				while (!this.stopping) {
					let store: DeliveryStore;
					try {
						store = await this.ready();
					} catch (err) {
						this.logger.warn(`dispatcher: relational store unavailable (${errorText(err)}); retrying`);
						await sleep(2000);
						continue;
					}
					const free = CONCURRENCY - this.inflight.size;
					let claimed: ClaimedDelivery[] = [];
					this.woken = false;
					if (free > 0) {
						try {
							claimed = await store.claim(this.owner, free, LEASE_SEC, PER_CONFIG, this.shares.shares());
						} catch (err) {
							if (this.stopping) break;
							this.logger.warn(`dispatcher: claiming deliveries failed: ${errorText(err)}`);
							await sleep(1000);
							continue;
						}
					}
					if (this.stopping) {
						// Claimed while stopping: given back untouched.
						await Promise.allSettled(claimed.map((row) => store.release(row.id, this.owner)));
						break;
					}
					for (const row of claimed) {
						const ac = new AbortController();
						this.inflight.set(row.id, ac);
						const key = row.config_id ?? "";
						this.shares.started(key);
						const run: Promise<void> = this.deliver(row, store, ac.signal)
							.catch((err) => this.logger.error(`dispatcher: delivery ${row.id} could not be settled (${errorText(err)}); it is retried after its lease`))
							.finally(() => {
								this.inflight.delete(row.id);
								const left = this.shares.finished(key);
								this.running.delete(run);
								// A finished delivery frees a slot of its config and may unblock the next event of its
								// document: the scheduler looks again for a batch (CLAIM_AT).
								if (this.starved ? CONCURRENCY - this.inflight.size >= CLAIM_AT : left <= PER_CONFIG / 2) this.wake();
							});
						this.running.add(run);
					}
					this.starved = claimed.length === free;
					if (this.stopping) break;
					if (free > 0 && claimed.length === free) continue;
					if (this.woken) continue;
					await nap(POLL_MS, (wake) => (this.wakeUp = wake));
				}
			},
		},
		created(this: Svc) {
			this.cfg = configOf(this.broker);
			this.owner = this.broker.nodeID;
			this.cache = new Map();
			this.births = new Map();
			this.failingLogged = new Map();
			this.literals = new Map();
			this.resolving = new Map();
			// An open breaker holds a config back at most as long as the retry schedule's longest delay.
			this.shares = new ConfigShares(PER_CONFIG, BREAKER_AFTER, () => Math.min(BREAKER_MAX_MS, 1000 * Math.max(0, ...this.cfg.webhookRetrySchedule)));
			this.metrics = WebhookMetrics.of(this.broker);
			this.inflight = new Map();
			this.running = new Set();
			this.poster = new Poster(REQUEST_TIMEOUT_MS);
			this.stopping = false;
			this.woken = false;
			this.starved = false;
		},
		async started(this: Svc) {
			try {
				await this.ready();
			} catch (err) {
				// The scheduler keeps trying; /status reports the relational store down meanwhile.
				this.logger.error(`dispatcher: relational store unavailable at start: ${errorText(err)}`);
			}
			this.loop = this.schedule();
		},
		async stopped(this: Svc) {
			this.stopping = true;
			// No new events while the queue shuts down (the base stops the consumer again afterwards: harmless).
			await this.consumer?.stop();
			this.wake();
			// In-flight requests are aborted: not counted as attempts, their leases released, retried after a restart.
			for (const ac of this.inflight.values()) ac.abort();
			await this.loop;
			await Promise.allSettled([...this.running]);
			this.poster.close();
			await this.readyP?.catch(() => undefined);
			if (
				this.openP &&
				(await this.openP.then(
					() => true,
					() => false,
				))
			)
				await releaseRelational(this.cfg);
		},
	},
);
