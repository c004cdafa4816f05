/**
 * The touch side of delivery: internal actions (never routed) through which the publisher's delivery engine finds due
 * records, claims one, and settles it. Records are the queue: `state` (emails, smss) or `status` (push-histories) is
 * QUEUED with a `next_at`, SENDING under a lease, then SENT or FAILED (push: RETRIED, GONE). A claim is a conditional
 * change QUEUED (due) → SENDING, or SENDING with an expired lease → SENDING, made under a short cache lock per record,
 * so however many publishers run, one holds a record at a time, and a record once SENT is never claimed again. Every
 * state change is a write with its change event.
 */
import type { Context } from "moleculer";
import { Aes, PUSH_KEYS, SMS_CREDENTIALS } from "../../lib/crypto";
import { configOf, loadKeys, type PlatformConfig } from "../../runtime/config";
import { sharedKeyValue } from "../../runtime/kv";
import { withLease } from "../../runtime/lock";
import { DELIVERABLE, isDeliverable, openPushKeys, openSmsCredentials, touchRetryDelay, type Deliverable, type SmsCredentials } from "../../lib/touch";
import type { Ctx, EngineService } from "../../engine/collection.mixin";
import type { StoredDoc } from "../../stores";
import { objectId, randomToken } from "../../lib/crypto";
import { CLAIM_ACTION, DUE_ACTION, SETTLE_ACTION, type Job, type Outcome } from "../../lib/contracts";

const LOCK_TTL_MS = 10_000;
const LOCK_WAIT_MS = 3_000;

const nowIso = () => new Date().toISOString();
const stateOf = (c: Deliverable) => DELIVERABLE[c];

/** The touch service's `this` (lib/service.ts): the engine's methods and the keys and settings deliveryState sets. */
export type TouchThis = EngineService & { aes: Aes; smsAes: Aes; cfg: PlatformConfig };
type Svc = TouchThis;

function lockKey(c: string, id: string) {
	return `touch:delivery:${c}:${id}`;
}

async function write(svc: Svc, ctx: Context, c: string, before: StoredDoc, set: Record<string, unknown>): Promise<StoredDoc | null> {
	const after: StoredDoc | null = await svc.collectionStore(c).setOne(before.id, { ...set, updated_at: nowIso() });
	if (after) await svc.recordChanges(ctx as unknown as Ctx, c, [{ op: "u", before, after }]);
	return after;
}

async function smsCredentials(svc: Svc, ctx: Context, doc: StoredDoc): Promise<SmsCredentials | null> {
	const provider = String(doc.provider);
	const eid = Array.isArray(doc.clients) ? String(doc.clients[0]) : "";
	if (eid) {
		const entries = (await ctx.call("context.configs.touch", { eid })) as Array<{ key: string; value: unknown }>;
		for (const e of entries) {
			if (e.key !== "SMS") continue;
			const creds = openSmsCredentials(svc.smsAes, e.value, provider);
			if (creds) return creds;
		}
	}
	const env = svc.cfg.smsProviders[provider];
	return env?.url && env.key ? { url: env.url, key: env.key, from: env.from } : null;
}

export function deliveryActions(): Record<string, unknown> {
	return {
		/** Due records of every deliverable collection (queued and due, or sending with an expired lease), oldest first. */
		[DUE_ACTION]: {
			visibility: "public",
			params: { limit: { type: "number", integer: true, positive: true, optional: true } },
			async handler(this: Svc, ctx: Context<{ limit?: number }>) {
				const limit = Math.min(ctx.params.limit ?? 50, 500);
				const now = nowIso();
				const out: Array<{ collection: Deliverable; id: string }> = [];
				for (const c of Object.keys(DELIVERABLE) as Deliverable[]) {
					const s = stateOf(c);
					const query = {
						deleted_at: null,
						$or: [
							{ [s]: "QUEUED", next_at: { $lte: now } },
							{ [s]: "SENDING", lease_until: { $lt: now } },
						],
					};
					const docs: StoredDoc[] = await this.collectionStore(c).find({ query, sort: { next_at: 1 }, limit, projection: { id: 1 } });
					for (const d of docs) out.push({ collection: c, id: d.id });
				}
				return out;
			},
		},
		/** Claims one record for `owner` for `lease_ms`: the job, or null when it is not due, taken, sent or gone. */
		[CLAIM_ACTION]: {
			visibility: "public",
			params: { collection: "string", id: "string", owner: "string", lease_ms: { type: "number", positive: true } },
			async handler(this: Svc, ctx: Context<{ collection: string; id: string; owner: string; lease_ms: number }>): Promise<Job | null> {
				const { collection: c, id, owner, lease_ms } = ctx.params;
				if (!isDeliverable(c)) return null;
				const kv = sharedKeyValue(this.cfg.redisUrl, this.cfg.redisPrefix);
				return withLease(kv, lockKey(c, id), LOCK_TTL_MS, LOCK_WAIT_MS, async () => {
					const store = this.collectionStore(c);
					const before: StoredDoc | null = await store.findOne({ id, deleted_at: null });
					if (!before) return null;
					const s = stateOf(c);
					const now = nowIso();
					const due = before[s] === "QUEUED" && String(before.next_at ?? "") <= now;
					const abandoned = before[s] === "SENDING" && String(before.lease_until ?? "") < now;
					if (!due && !abandoned) return null;
					const attempt = c === "push-histories" ? Number(before.attempt ?? 1) : Number(before.attempts ?? 0) + 1;
					const set: Record<string, unknown> = { [s]: "SENDING", lease: owner, lease_until: new Date(Date.now() + lease_ms).toISOString() };
					if (c !== "push-histories") set.attempts = attempt;
					const after = await write(this, ctx, c, before, set);
					if (!after) return null;
					const { lease: _l, lease_until: _u, ...doc } = after;
					const job: Job = { collection: c, id, attempt, created_at: String(after.created_at), doc };
					if (c === "smss") job.sms = await smsCredentials(this, ctx, after);
					if (c === "push-histories") {
						const sub: StoredDoc | null = await this.collectionStore("pushes").findOne({ id: after.to, deleted_at: null });
						const keys = sub ? openPushKeys(this.aes, sub.keys) : null;
						job.subscription = sub && keys && typeof sub.endpoint === "string" ? { endpoint: sub.endpoint, keys } : null;
					}
					return job;
				});
			},
		},
		/**
		 * Settles a claimed record with the attempt's outcome, if `owner` still holds it: SENT; or QUEUED again after the
		 * retry delay (push: this record RETRIED and a new QUEUED one for the next attempt); or FAILED once permanent or
		 * out of attempts (push GONE: the subscription is removed). Answers `{ settled, state }`.
		 */
		[SETTLE_ACTION]: {
			visibility: "public",
			params: { collection: "string", id: "string", owner: "string", outcome: "object" },
			async handler(this: Svc, ctx: Context<{ collection: string; id: string; owner: string; outcome: Outcome }>) {
				const { collection: c, id, owner, outcome } = ctx.params;
				if (!isDeliverable(c)) return { settled: false };
				const kv = sharedKeyValue(this.cfg.redisUrl, this.cfg.redisPrefix);
				return withLease(kv, lockKey(c, id), LOCK_TTL_MS, LOCK_WAIT_MS, async () => {
					const before: StoredDoc | null = await this.collectionStore(c).findOne({ id });
					const s = stateOf(c);
					// Lost the lease (it expired and another publisher took the record): that one settles it.
					if (!before || before[s] !== "SENDING" || before.lease !== owner) return { settled: false };
					const now = nowIso();
					const infoField = c === "emails" ? "smtp" : "res";
					const common: Record<string, unknown> = { lease: null, lease_until: null };
					if (outcome.info !== undefined) common[infoField] = outcome.info;
					if (outcome.ok) {
						await write(this, ctx, c, before, { ...common, [s]: "SENT", sent_at: now, reason: null, next_at: null });
						return { settled: true, state: "SENT" };
					}
					const reason = String(outcome.reason ?? "failed").slice(0, 2000);
					if (c === "push-histories") {
						const attempt = Number(before.attempt ?? 1);
						if (outcome.gone) {
							// The subscription goes first: once the attempt reads GONE, the subscription is already removed.
							const sub: StoredDoc | null = await this.collectionStore("pushes").findOne({ id: before.to });
							if (sub && (await this.collectionStore("pushes").removeMany({ id: sub.id })) > 0)
								await this.recordChanges(ctx as unknown as Ctx, "pushes", [{ op: "d", before: sub, after: null }]);
							await write(this, ctx, c, before, { ...common, status: "GONE", reason, next_at: null });
							return { settled: true, state: "GONE" };
						}
						const delay = outcome.permanent ? undefined : touchRetryDelay(this.cfg.touchRetrySchedule, attempt);
						if (delay === undefined) {
							await write(this, ctx, c, before, { ...common, status: "FAILED", reason, next_at: null });
							return { settled: true, state: "FAILED" };
						}
						await write(this, ctx, c, before, { ...common, status: "RETRIED", reason, next_at: null });
						// The next attempt is a record of its own (every attempt writes one), with the same owner, tenant and message.
						const { res: _r, reason: _why, sent_at: _s, ...kept } = before;
						const next: StoredDoc = {
							...kept,
							id: objectId(),
							status: "QUEUED",
							attempt: attempt + 1,
							next_at: new Date(Date.now() + delay * 1000).toISOString(),
							lease: null,
							lease_until: null,
							created_at: now,
							updated_at: now,
							rand: randomToken(12),
							timestamp: String(Date.now()),
						};
						await this.collectionStore(c).insert(next);
						await this.recordChanges(ctx as unknown as Ctx, c, [{ op: "c", before: null, after: next }]);
						return { settled: true, state: "RETRIED" };
					}
					const attempts = Number(before.attempts ?? 1);
					const delay = outcome.permanent ? undefined : touchRetryDelay(this.cfg.touchRetrySchedule, attempts);
					if (delay === undefined) {
						await write(this, ctx, c, before, { ...common, [s]: "FAILED", reason, next_at: null });
						return { settled: true, state: "FAILED" };
					}
					await write(this, ctx, c, before, { ...common, [s]: "QUEUED", reason, next_at: new Date(Date.now() + delay * 1000).toISOString() });
					return { settled: true, state: "QUEUED" };
				});
			},
		},
	};
}

/** Service lifecycle helper: the keys and settings the delivery actions use. */
export function deliveryState(svc: TouchThis): void {
	svc.cfg = configOf(svc.broker);
	const secret = loadKeys(svc.cfg).aesSecret;
	svc.smsAes = Aes.forPurpose(secret, SMS_CREDENTIALS);
	svc.aes = Aes.forPurpose(secret, PUSH_KEYS);
}
