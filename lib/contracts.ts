/**
 * The names a worker (or another service) uses to reach a domain, and the shapes that travel with them: events
 * broadcast, actions called, their payloads and answers. The service that answers and the worker that calls both
 * import them from here, so a worker never imports a service's file (docs/architecture.md, "Rooms"). Names only: no
 * behaviour, no I/O.
 */
import type { Deliverable, SmsCredentials } from "./touch";
import type { Counter } from "./stat-buckets";

// --- authority -------------------------------------------------------------------------------------------------

/**
 * Broadcast after any change of a grant or a role (auth, context's RBAC config, the preserver, the watcher): every
 * node's grant index reloads on next use (authority/grant-cache.ts; the engine passes it on, engine/authority-hook.ts).
 */
export const AUTHORITY_CHANGED = "authority.changed";
/** auth: what an API token's revocation closes, `{ id }` -> `{ session?, hash?, live }` (the watcher). */
export const APT_REVOCATION_ACTION = "auth.apts.revocation";

// --- context: webhook registrations (the dispatcher, the watcher) ------------------------------------------------

/** Broadcast after any write to a CQRS config: `{ eids }`, the client ids whose webhook registration changed. */
export const CQRS_CHANGED = "context.cqrs.changed";

/** A webhook registration as the dispatcher sees it. `value` holds secrets: never log it. */
export interface CqrsConfig {
	id: string;
	eid: string;
	value: { webhook?: unknown; authorization?: unknown; secret?: unknown; active?: unknown; [k: string]: unknown };
	/** False once the platform disabled it (410, retries exhausted, refused address); the client re-enables it by
	 * patching `value` (without `active: false`). */
	active: boolean;
	/** Creation time (ms): changes written before the webhook was registered are not delivered to it. */
	since: number;
}

/** context: the active webhook registration of a client, `{ eid }` -> CqrsConfig | null. */
export const CQRS_CONFIG_ACTION = "context.configs.cqrs";
/** context: enables or disables a registration, `{ id, active, reason? }` (the dispatcher, on 410 or exhausted retries). */
export const CQRS_ACTIVE_ACTION = "context.configs.cqrsActive";

// --- the gateway's operator routes: webhook deliveries (dispatcher) and the audit trail (logger) ---------------

/** A page of a listing newest first: `next` is the `before` of the next (older) page, null at the end. */
export interface Page<T> {
	items: T[];
	next: string | null;
}

/**
 * A webhook delivery as the public route shows it (GET /context/configs/:id/deliveries): never its payload (the
 * change event: a document), its URL (it may hold a token in its query) or its lease.
 */
export interface DeliveryView {
	id: string;
	topic: string;
	op: string;
	document_id: string;
	status: "pending" | "delivered" | "failed" | "disabled";
	attempts: number;
	next_at: string;
	last_status: number | null;
	last_error: string | null;
	created_at: string;
	delivered_at: string | null;
}

/**
 * dispatcher: the deliveries of one config of one client, newest first,
 * `{ config_id, client_id, status?, before?, limit }` -> Page<DeliveryView>.
 */
export const CONFIG_DELIVERIES_ACTION = "dispatcher.configDeliveries";
/**
 * dispatcher: re-queues a failed or disabled delivery, `{ id, client_id?, config_id? }` (given: the delivery must be
 * theirs, else 404 as for none) -> `{ requeued, deliveries }`; 409 for a delivery in another status.
 */
export const REPLAY_ACTION = "dispatcher.replay";

/** An audit entry as the public route shows it (GET /general/activities/audit): never its session id. */
export interface AuditView {
	id: string;
	at: string;
	kind: "request" | "change";
	method: string | null;
	path: string | null;
	action: string | null;
	service: string | null;
	collection: string | null;
	document_id: string | null;
	op: string | null;
	status: number | null;
	duration_ms: number | null;
	uid: string | null;
	aid: string | null;
	cid: string | null;
	ip: string | null;
	replayed: boolean | null;
}

/** The audit trail's filters (every one optional, ANDed); `cid` set: that client's entries only. */
export interface AuditFilter {
	cid?: string;
	from?: string;
	to?: string;
	kind?: "request" | "change";
	/** A path prefix (`/content/notes`). */
	path?: string;
	action?: string;
	uid?: string;
	status?: number;
	before?: string;
	limit: number;
}

/** logger: a page of the audit trail, newest first, AuditFilter -> Page<AuditView>. */
export const AUDIT_ENTRIES_ACTION = "logger.entries";

// --- essential: sagas (the watcher) ------------------------------------------------------------------------------

/** essential: settles the sagas past their deadline, `{ limit }`. */
export const SAGAS_EXPIRE_ACTION = "essential.sagas.expire";

// --- special: stats (the observer) and files (the publisher's attachments) ------------------------------------

/** special: adds a batch of change events' counts, `{ increments: StatsIncrement[] }` -> StatsApplied. */
export const STATS_INCREMENT_MANY_ACTION = "special.stats.incrementMany";

export interface StatsIncrement {
	/** Stream position of the change event: the redelivery guard. */
	seq: number;
	service: string;
	collection: string;
	counter: Counter;
	/** Time of the change (ms): chooses the buckets. */
	ts_ms: number;
	/** The changed document's `clients`: each tenant gets its own buckets. Empty: one platform-wide set. */
	clients: string[];
}

export interface StatsApplied {
	/** (event, tenant, period) counts added. */
	applied: number;
	/** (event, tenant, period) counts already there (a redelivery). */
	skipped: number;
}

/** special: the attachments' metadata a message names, `{ ids, ...caller }`. */
export const FILES_ATTACHMENTS_ACTION = "special.files.attachments";
/** special: one file's content as a stream, `{ id, ...caller }`. */
export const FILES_CONTENT_ACTION = "special.files.content";

// --- touch: deliveries (the publisher) ---------------------------------------------------------------------------

/** touch's delivery actions (called as `touch.<name>`). */
export const CLAIM_ACTION = "delivery.claim";
export const SETTLE_ACTION = "delivery.settle";
export const DUE_ACTION = "delivery.due";

/** What the engine gets for a claimed record: what to send, with the secrets it needs in clear (never log it). */
export interface Job {
	collection: Deliverable;
	id: string;
	/** Attempt number of this claim (1 = first). */
	attempt: number;
	created_at: string;
	doc: Record<string, unknown>;
	/** smss: the provider's credentials (tenant config, else environment); null = not configured. */
	sms?: SmsCredentials | null;
	/** push-histories: the subscription to send to; null = it is gone. */
	subscription?: { endpoint: string; keys: { p256dh: string; auth: string } } | null;
}

export interface Outcome {
	ok: boolean;
	/** emails: `smtp`; smss and pushes: `res`. Without credentials. */
	info?: Record<string, unknown>;
	reason?: string;
	/** Not worth retrying (no transport, a 4xx that is not 429, a rejected address). */
	permanent?: boolean;
	/** pushes: the push service answered 404/410: the subscription is removed. */
	gone?: boolean;
}
