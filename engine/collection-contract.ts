/**
 * The collection engine's contract with the rest of the platform: the parameters and context of a collection action,
 * the hooks a domain gives it, the metadata the authority middleware reads on each action, a recorded change, the
 * service's `this` and the internal purge action's shape. Types and constants only, besides `platformContext` and
 * `actionName`, so that importing them pulls in no store or outbox.
 */
import type { Context, Service, ServiceBroker } from "moleculer";
import type { STANDARD_OPS, StandardOp } from "../catalog";
import type { ChangeOp } from "../lib/change-event";
import type { RequestMeta, Doc } from "../lib/types";
import type { DocumentStore, StoredDoc } from "../stores";

export const MAX_BULK = 1000;
/** Documents per keyset batch of a bulk patch and of a purge. */
export const BATCH = 200;

/** Params of every collection action: moleculer-web with `mergeParams: false`, or a broker call of the same shape. */
export interface CollectionParams {
	body?: unknown;
	query?: Record<string, unknown>;
	params?: { id?: string };
	/** Set by the gateway's cursor loop only (never reachable from HTTP, whose values live under `query`). */
	page?: { offset: number; size: number };
}

export type Ctx = Context<CollectionParams, RequestMeta>;

/**
 * The context of a write the platform makes itself (the root seed, a new user's wallet): no caller, no token, so its
 * change events are recorded like any other write's (webhooks, MQTT, stats) without a principal in them.
 */
export function platformContext(service: { broker: ServiceBroker }): Ctx {
	const b = service.broker;
	return { meta: {}, service, call: b.call.bind(b), broadcast: b.broadcast.bind(b), emit: b.emit.bind(b) } as unknown as Ctx;
}

/** Behaviour of one collection beyond the pattern (hashing, generated values, side effects). */
export interface CollectionHooks {
	/** May change the document before insert; fields it returns are added to the create response only (once). */
	beforeCreate?(ctx: Ctx, doc: StoredDoc): Promise<Record<string, unknown> | void> | Record<string, unknown> | void;
	beforePatch?(ctx: Ctx, set: Record<string, unknown>, before: StoredDoc | null): Promise<void> | void;
	afterWrite?(ctx: Ctx, op: ChangeOp, before: StoredDoc | null, after: StoredDoc | null): Promise<void> | void;
	/** May refuse a restore (throw) of the deleted document about to be restored. */
	beforeRestore?(ctx: Ctx, before: StoredDoc): Promise<void> | void;
	/**
	 * May refuse (throw) the soft delete (`remove`) or destroy of `before`. The removal is then conditional on the
	 * revision the hook saw: a write in between (a balance move too) makes the hook see the document again.
	 */
	beforeRemove?(ctx: Ctx, before: StoredDoc, op: "remove" | "destroy"): Promise<void> | void;
	/** Removes secrets nested in free-form fields from the `before`/`after` of change events (CQRS webhook credentials). */
	redact?(doc: Doc): Doc;
	/**
	 * Handlers of the collection's special actions, by name (`start`, `abort` for `:id/abort`), run after the
	 * authority layer (ctx.locals.plan: the caller's view for that action). The catalog marks them `implemented`.
	 */
	specials?: Record<string, (ctx: Ctx) => Promise<unknown>>;
}

/** Metadata of a special action (`<collection>.<name>`), read by the authority middleware (authority/authority.ts). */
export interface SpecialActionMeta {
	service: string;
	collection: string;
	/** The grant action, also the scope's first part: `start`, `payment`, ... */
	action: string;
	/** Addressed by id (`:id/abort`): the plan's filter holds the id condition. */
	byId: boolean;
}

/** Metadata the authority middleware reads on every collection action. */
export interface CollectionActionMeta {
	service: string;
	collection: string;
	op: StandardOp;
	level: (typeof STANDARD_OPS)[StandardOp];
}

export type Change = { op: ChangeOp; before: StoredDoc | null; after: StoredDoc | null };

/** A domain service's `this` as the engine makes it: its methods for the domain's own hooks and internal actions. */
export type EngineService = Service & {
	collectionStore(name: string): DocumentStore;
	recordChanges(ctx: Ctx, name: string, changes: Change[]): Promise<void>;
};

/** Internal action of every collection, `{collection}.purge` (never routed): see `purge` in engine/collection-actions.ts. */
export const PURGE_ACTION = "purge";
export interface PurgeParams {
	/** ISO date: documents whose `deleted_at` is earlier are removed. */
	before: string;
	/** At most this many per call (default: all). */
	limit?: number;
}

export function actionName(collection: string, op: string): string {
	return `${collection}.${op}`;
}

/** Each collection's change recorder (its change events, then its `afterWrite` hook), by collection name. */
export type Recorders = Map<string, (ctx: Ctx, changes: Change[], svc?: unknown) => Promise<void>>;
