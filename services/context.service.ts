/**
 * context: configuration entries and settings. RBAC entries feed the grant engine: any change to one is
 * broadcast so every node reloads its grant index. CQRS entries (webhook registrations) are read by the dispatcher
 * through `configs.cqrs`; a change to one is broadcast (CQRS_CHANGED) so every dispatcher drops its cached copy.
 */
import type { Context, ServiceSchema } from "moleculer";
import { context } from "../catalog/domains/context";
import { collectionMixin, type Ctx } from "../mixins/collection.mixin";
import { AUTHORITY_CHANGED } from "../middlewares/grant-cache";
import type { StoredDoc } from "../mixins/stores";

const isRbac = (d: StoredDoc | null) => d?.key === "RBAC";
const isCqrs = (d: StoredDoc | null) => d?.key === "CQRS";

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

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === "object" && !Array.isArray(v);

export function cqrsOf(d: StoredDoc): CqrsConfig {
	const value = (isObject(d.value) ? d.value : {}) as CqrsConfig["value"];
	const since = Date.parse(String(d.created_at ?? ""));
	return { id: d._id, eid: String(d.eid), value, active: value.active !== false, since: Number.isNaN(since) ? 0 : since };
}

const ContextService: ServiceSchema = {
	name: "context",
	mixins: [
		collectionMixin(context, {
			configs: {
				// A CQRS value's `secret` and `authorization` are credentials: change events (webhook and MQTT payloads,
				// audit) never carry them. Reading the config itself (GET) still returns them to whoever may read it.
				redactEvent(doc) {
					if (doc.key !== "CQRS" || !isObject(doc.value)) return doc;
					const { secret: _s, authorization: _a, ...value } = doc.value;
					return { ...doc, value };
				},
				async afterWrite(ctx, op, before, after) {
					if (isRbac(before) || isRbac(after)) ctx.broadcast(AUTHORITY_CHANGED, {});
					if (isCqrs(before) || isCqrs(after)) {
						const eids = [...new Set([before, after].filter(isCqrs).map((d) => String(d!.eid)))];
						ctx.broadcast(CQRS_CHANGED, { eids });
					}
				},
			},
		}),
	],
	actions: {
		/** Every live RBAC configuration value (role → permission → grant expansion), for the grant index. */
		"configs.rbac": {
			visibility: "public",
			async handler(this: any) {
				const docs: StoredDoc[] = await this.collectionStore("configs").find({ query: { key: "RBAC", deleted_at: null } });
				return docs.map((d) => ({ eid: d.eid, value: d.value }));
			},
		},
		/**
		 * The live CQRS (webhook) config of a client, or null: not deleted; an active one before an inactive one, then
		 * the most recently updated. Internal (the dispatcher); the value carries the webhook secret.
		 */
		"configs.cqrs": {
			visibility: "public",
			params: { eid: "string" },
			async handler(this: any, ctx: Context<{ eid: string }>): Promise<CqrsConfig | null> {
				const docs: StoredDoc[] = await this.collectionStore("configs").find({ query: { key: "CQRS", eid: ctx.params.eid, deleted_at: null } });
				if (!docs.length) return null;
				const all = docs.map((d) => ({ c: cqrsOf(d), at: String(d.updated_at ?? d.created_at ?? "") }));
				all.sort((a, b) => Number(b.c.active) - Number(a.c.active) || (a.at < b.at ? 1 : a.at > b.at ? -1 : 0));
				return all[0].c;
			},
		},
		/**
		 * Disables (`active: false`, with `reason`) or re-enables a CQRS config: written into its value as `active`,
		 * `disabled_at`, `disabled_reason`, with a change event like any write. Internal (dispatcher, operators).
		 */
		"configs.cqrsActive": {
			visibility: "public",
			params: { id: "string", active: "boolean", reason: { type: "string", optional: true } },
			async handler(this: any, ctx: Context<{ id: string; active: boolean; reason?: string }>): Promise<CqrsConfig | null> {
				const store = this.collectionStore("configs");
				const before: StoredDoc | null = await store.findOne({ id: ctx.params.id, key: "CQRS", deleted_at: null });
				if (!before) return null;
				const current = cqrsOf(before);
				if (current.active === ctx.params.active) return current;
				const { active: _a, disabled_at: _d, disabled_reason: _r, ...rest } = current.value;
				const value = ctx.params.active ? rest : { ...rest, active: false, disabled_at: new Date().toISOString(), disabled_reason: ctx.params.reason ?? "disabled" };
				const after: StoredDoc | null = await store.setOne(before._id, { value, updated_at: new Date().toISOString() });
				if (!after) return null;
				await this.recordChanges(ctx as unknown as Ctx, "configs", [{ op: "u", before, after }]);
				return cqrsOf(after);
			},
		},
	},
};

export default ContextService;
