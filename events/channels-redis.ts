/** Redis Streams under the production stream: a group's stop that keeps the events its consumer still holds for a retry. */
import type { AdapterChannel, RedisAdapter } from "./channels-adapter";

/**
 * The adapter's unsubscribe without its unconditional XGROUP DELCONSUMER (events/channels.stream.ts, "pitfalls"): the
 * consumer goes only when it holds no event pending, else its events would be lost with it.
 */
export async function unsubscribeRedis(a: RedisAdapter, chan: AdapterChannel): Promise<void> {
	a.clients.get(chan.id)?.disconnect();
	await new Promise((r) => setTimeout(r, 100));
	while (a.getNumberOfChannelActiveMessages(chan.id) > 0) await new Promise((r) => setTimeout(r, 100));
	a.clients.delete(chan.id);
	if (a.activeMessages.has(chan.id)) a.stopChannelActiveMessages(chan.id);
	const pub = a.clients.get(a.pubName)!;
	const summary = (await pub.xpending(chan.name, chan.group)) as [number, string, string, Array<[string, string]> | null];
	const held = Number((summary[3] ?? []).find(([name]) => name === chan.id)?.[1] ?? 0);
	if (!held) await pub.xgroup("DELCONSUMER", chan.name, chan.group, chan.id);
}
