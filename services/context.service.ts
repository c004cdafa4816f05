/**
 * context: configuration entries and settings. RBAC entries feed the grant engine: any change to one is
 * broadcast so every node reloads its grant index.
 */
import type { ServiceSchema } from "moleculer";
import { context } from "../catalog/domains/context";
import { collectionMixin } from "../mixins/collection.mixin";
import { AUTHORITY_CHANGED } from "../middlewares/grant-cache";
import type { StoredDoc } from "../mixins/stores";

const isRbac = (d: StoredDoc | null) => d?.key === "RBAC";

const ContextService: ServiceSchema = {
	name: "context",
	mixins: [
		collectionMixin(context, {
			configs: {
				async afterWrite(ctx, op, before, after) {
					if (isRbac(before) || isRbac(after)) ctx.broadcast(AUTHORITY_CHANGED, {});
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
	},
};

export default ContextService;
