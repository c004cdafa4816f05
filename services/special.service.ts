/**
 * special: the standard collection pattern on every collection of the domain (catalog/domains/special.ts), file
 * content (services/special/files.ts: upload, share, download, orphans), and the observer's internal write path
 * into special/stats (`stats.increment`).
 */
import type { StatsApplied, StatsIncrement } from "../lib/contracts";
import type { Context, Service, ServiceSchema } from "moleculer";
import { special } from "../catalog/domains/special";
import { collectionMixin, type EngineService } from "../engine/collection.mixin";
import { asSchema } from "../lib/service";
import type { RequestMeta } from "../lib/types";
import { configOf } from "../runtime/config";
import { badRequest } from "../lib/errors";
import { sharedKeyValue } from "../runtime/kv";
import { applyIncrements, validIncrement } from "./special/stats";
import { collect } from "./special/collect";
import { filesHooks, filesMixin } from "./special/files";

const statsLeases = (svc: Service) => {
	const cfg = configOf(svc.broker);
	return sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
};

type Call<P> = Context<P, RequestMeta>;

const SpecialService: ServiceSchema = asSchema<EngineService>({
	name: "special",
	mixins: [collectionMixin(special, { stats: { specials: { collect } }, files: filesHooks }), filesMixin],
	actions: {
		/**
		 * The observer's write into special/stats (internal, never routed): +1 on `counter` in the daily, monthly and
		 * yearly buckets of each tenant. Idempotent: a bucket remembers the latest positions it counted, so a
		 * redelivered event is skipped. Read-modify-write runs under a lease per tenant and collection, so observer
		 * instances on several nodes do not lose updates. These writes append no change events: stats are derived
		 * data, and events about them would feed the observer and triple every tenant's webhook traffic.
		 */
		"stats.increment": {
			visibility: "public",
			async handler(this: EngineService, ctx: Call<StatsIncrement>): Promise<StatsApplied> {
				return applyIncrements(this.collectionStore("stats"), statsLeases(this), [validIncrement(ctx.params)]);
			},
		},
		/** `stats.increment` for a batch of change events (`increments`): summed per bucket, one write per bucket. */
		"stats.incrementMany": {
			visibility: "public",
			async handler(this: EngineService, ctx: Call<{ increments?: StatsIncrement[] }>): Promise<StatsApplied> {
				const list = ctx.params.increments;
				if (!Array.isArray(list)) throw badRequest("increments must be an array");
				return applyIncrements(this.collectionStore("stats"), statsLeases(this), list.map(validIncrement));
			},
		},
	},
});

export default SpecialService;
