/** RATE_LIMIT at the gateway: one token bucket per principal, or per IP before authentication (docs/production.md). */
import type { PlatformConfig } from "../../runtime/config";
import { ApiError } from "../../lib/errors";
import type { Gateway, Res } from "./gateway";

/** The gateway's rate-limit method (mixed into its `methods`). */
export const rateLimitMethods = {
	/**
	 * RATE_LIMIT (off by default): one token bucket per principal or IP in the platform cache (runtime/kv rateTake:
	 * GCRA, atomic in Redis, so every gateway shares it). Empty → 429 `too many requests` with Retry-After in
	 * whole seconds. An unreachable cache lets the request through (the limit protects, it must not take the
	 * platform down with the cache).
	 */
	async limitRate(this: Gateway, res: Res, who: string) {
		const limit = this.cfg.rateLimit as PlatformConfig["rateLimit"];
		if (!limit) return;
		let wait = 0;
		try {
			wait = await this.kv.rateTake(`rate:${who}`, limit.rate, limit.burst);
		} catch {
			return;
		}
		if (wait <= 0) return;
		if (!res.headersSent) res.setHeader("Retry-After", String(Math.max(1, Math.ceil(wait / 1000))));
		throw new ApiError(429, "too many requests");
	},
};
