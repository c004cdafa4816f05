/**
 * The collection engine: the spec's 11-endpoint pattern for every collection of one domain, built from the catalog.
 * This file assembles the domain service's schema: each collection's standard actions (engine/collection-actions.ts,
 * wrapped for saga staging), its special actions, settlement and purge, the health action and the lifecycle
 * (engine/collection-lifecycle.ts), the service's methods. It re-exports the engine's contract
 * (engine/collection-contract.ts) and document helpers (engine/document.ts), which other files import from here.
 */
import { AUTHORITY_CHANGED } from "../lib/contracts";
import type { Context, ServiceSchema } from "moleculer";
import { STANDARD_OPS, type DomainDef, type StandardOp } from "../catalog";
import { notFound } from "../lib/errors";
import { requirePlan } from "../lib/plan";
import type { RequestMeta } from "../lib/types";
import type { DocumentStore } from "../stores";
import { authorityChanged } from "./authority-hook";
import { HEALTH_ACTION } from "../runtime/health";
import { opsPortMixin } from "./ops-port.mixin";
import { settle, stagedAction, type Image, type SettleReason } from "./saga-staging";
import { specialName } from "../catalog";
import { asSchema } from "../lib/service";
import { unpinned } from "../stores/revision";
import {
	actionName,
	PURGE_ACTION,
	type Change,
	type CollectionActionMeta,
	type CollectionHooks,
	type Ctx,
	type PurgeParams,
	type Recorders,
	type SpecialActionMeta,
} from "./collection-contract";
import { collectionHandlers, ifMatch, purge, routed } from "./collection-actions";
import { engineLifecycle, healthAction, state, type Engine } from "./collection-lifecycle";

export {
	MAX_BULK,
	PURGE_ACTION,
	actionName,
	platformContext,
	type Change,
	type CollectionActionMeta,
	type CollectionHooks,
	type CollectionParams,
	type Ctx,
	type EngineService,
	type PurgeParams,
	type SpecialActionMeta,
} from "./collection-contract";
export { USERS_OUTSIDE_TENANT, assertShares, ifMatch } from "./collection-actions";
export { platformDoc } from "./document";

export function collectionMixin(domain: DomainDef, hooks: Record<string, CollectionHooks> = {}): Partial<ServiceSchema> {
	const recorders: Recorders = new Map();

	const actions: ServiceSchema["actions"] = {};
	for (const col of domain.collections) {
		const handlers = collectionHandlers(domain, hooks, recorders, col);
		for (const op of Object.keys(STANDARD_OPS) as StandardOp[]) {
			const meta: CollectionActionMeta = { service: domain.name, collection: col.name, op, level: STANDARD_OPS[op] };
			actions[actionName(col.name, op)] = { collection: meta, handler: stagedAction(domain, col, op, handlers[op]) };
		}
		const specials = hooks[col.name]?.specials ?? {};
		for (const sp of col.specials ?? []) {
			const name = specialName(sp);
			if (!specials[name]) continue;
			const meta: SpecialActionMeta = { service: domain.name, collection: col.name, action: sp.action, byId: sp.path.startsWith(":id/") };
			const handler = specials[name];
			// A special addressed by id honours If-Match on its document (read in the caller's view: 404 first, as always).
			actions[actionName(col.name, name)] = {
				special: meta,
				handler: !meta.byId
					? handler
					: async function (this: Engine, ctx: Ctx) {
							if (!routed(ctx) || ctx.meta.headers?.["if-match"] === undefined) return handler.call(this, ctx);
							const store = state(this).stores.get(col.name)!;
							const doc = await store.findOne(requirePlan(ctx.locals).filter);
							if (!doc) throw notFound();
							return ifMatch(ctx, store, doc, () => handler.call(this, ctx));
						},
			};
		}
		// Saga compensation and commit settlement of this collection's stages (never routed).
		actions[actionName(col.name, "settle")] = {
			visibility: "public",
			handler(this: Engine, ctx: Context<{ images: Image[]; reason: SettleReason; conflicted?: boolean }, RequestMeta>) {
				const store = state(this).stores.get(col.name)!;
				const record = (changes: Change[]) => recorders.get(col.name)!(ctx as unknown as Ctx, changes, this);
				// Settlement a pinned action set off (a payment's, a verify's) is the platform's, never conditional on its If-Match.
				return unpinned(() => settle({ store, record }, ctx.params.images ?? [], ctx.params.reason, ctx.params.conflicted === true));
			},
		};
		actions[actionName(col.name, PURGE_ACTION)] = {
			visibility: "public",
			handler: (ctx: Context<PurgeParams, RequestMeta>) => purge(recorders, col.name, ctx as unknown as Ctx),
		};
	}
	actions[HEALTH_ACTION] = healthAction;

	return asSchema<Engine>({
		name: domain.name,
		// GET /status and /metrics on the domain's spec port when the node runs without the gateway.
		mixins: [opsPortMixin(domain.restPort)],
		settings: { domain: domain.name, restPort: domain.restPort, grpcPort: domain.grpcPort },
		actions,
		events: {
			// A grant or role change anywhere: this node's grant index reloads on next use (the authority layer's
			// invalidation, registered in engine/authority-hook.ts).
			[AUTHORITY_CHANGED]() {
				authorityChanged();
			},
		},
		methods: {
			/** Direct store access for the domain's own hooks and internal actions (never for client-driven reads). */
			collectionStore(this: Engine, name: string): DocumentStore {
				const s = state(this).stores.get(name);
				if (!s) throw new Error(`no collection ${name} in ${domain.name}`);
				return s;
			},
			/** Change events for a platform-made write (internal actions and hooks write through this too). */
			recordChanges(this: Engine, ctx: Ctx, name: string, changes: Change[]): Promise<void> {
				return recorders.get(name)!(ctx, changes, this);
			},
		},
		...engineLifecycle(domain),
	});
}
