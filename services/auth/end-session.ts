/**
 * Ending a session (logout, an APT deleted, a refresh token presented twice): the durable close first (it is the
 * revocation: a cache that loses its entries cannot bring the session back), then the cache's blacklist (its
 * shortcut, skipped without the cache), then every gateway told and waited for, so that once this resolves every
 * token of the session answers 401 on every node.
 */
import type { Context } from "moleculer";
import type { KeyValue } from "../../runtime/kv";
import { announceRevocation, blacklistSession } from "../../authority/authenticate";

export async function endSession(ctx: Context<unknown, object>, kv: KeyValue, session: string, aptHashes: string[] = []): Promise<void> {
	await ctx.call("identity.sessions.close", { id: session });
	await blacklistSession(kv, session);
	await announceRevocation(ctx.broker, { sessions: [session], hashes: aptHashes });
}
