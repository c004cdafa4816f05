/**
 * NATS JetStream under the production stream: the streams with their limits, each group's durable pull consumer (see
 * events/channels.stream.ts, "pitfalls", for why pull rather than the adapter's push groups), its pulling, and its
 * stop.
 */
import { streamNameOf, subjectOf, type AdapterChannel, type JsConsumerConfig, type JsConsumerInfo, type NatsAdapter } from "./channels-adapter";
import { nanos } from "./channels-options";

/**
 * How long a NATS group's pull request waits for events before the server ends it (the client asks again at once);
 * the server sends a heartbeat every half of it to an idle request, and nats.js asks anew after two missed ones.
 */
export const PULL_EXPIRES_MS = 10_000;

/** The group a pull consumer serves: its name, its channel (before the namespace prefix), its events in flight at most. */
export interface GroupSpec {
	group: string;
	channel: string;
	maxInFlight: number;
}

type Warn = (message: string) => void;

/** A group's durable name: the adapter's naming (dots become underscores). */
export const durableOf = (group: string) => group.split(".").join("_");

/**
 * The stream with its limits, before anything is published or consumed: the relay's first events must not find
 * no stream, and a stream created earlier without limits gets them.
 */
export async function ensureStream(a: NatsAdapter, channel: string, limits: Record<string, unknown>): Promise<void> {
	const jsm = a.manager;
	const name = streamNameOf(a, channel);
	const config = { name, subjects: [subjectOf(a, channel)], ...limits };
	try {
		await jsm.streams.add(config);
	} catch {
		const info = await jsm.streams.info(name);
		await jsm.streams.update(name, { ...info.config, ...limits });
	}
}

/**
 * A NATS group's events for `chan`: its dead-letter stream and pull consumer made sure of, then the events asked for
 * (at most `maxInFlight` at a time) and each handed to the adapter's handler. nats.js asks again after a reconnect
 * and after missed heartbeats.
 */
export async function pull(a: NatsAdapter, sub: GroupSpec, chan: AdapterChannel, ackWaitMs: number, limits: Record<string, unknown>, warn: Warn): Promise<void> {
	await ensureStream(a, `${sub.channel}.failed`, limits);
	chan.deadLettering.queueName = a.addPrefixTopic(chan.deadLettering.queueName);
	const durable = await ensureGroup(a, sub, ackWaitMs, warn);
	const consumer = await a.client.consumers.get(streamNameOf(a, sub.channel), durable);
	a.initChannelActiveMessages(chan.id);
	const handle = a.createConsumerHandler(chan);
	chan.messages = await consumer.consume({
		max_messages: sub.maxInFlight,
		expires: PULL_EXPIRES_MS,
		// The adapter's handler acknowledges, retries or dead-letters; an acknowledgement on a closed connection throws.
		callback: (msg: unknown) => void handle(null, msg).catch((err: Error) => warn(`event stream: group ${sub.group} could not settle an event (${err.message})`)),
	});
	// A connection closed for good (a stop, a crash test) ends the requests: their heartbeat checks would go on.
	void a.connection.closed().then(() => chan.messages?.close());
}

/**
 * The group's durable pull consumer, with the configured ack wait and in-flight limit (an existing group is
 * brought to them); its name. A push group of an earlier version is replaced by a pull group that starts after its
 * acknowledgement floor. A group's start policy cannot change: one created with `deliver_policy: new` by something
 * else is reported.
 */
async function ensureGroup(a: NatsAdapter, sub: GroupSpec, ackWaitMs: number, warn: Warn): Promise<string> {
	const jsm = a.manager;
	const durable = durableOf(sub.group);
	const stream = streamNameOf(a, sub.channel);
	const want = { ack_wait: nanos(ackWaitMs), max_ack_pending: sub.maxInFlight };
	const config: JsConsumerConfig = { durable_name: durable, filter_subject: subjectOf(a, sub.channel), deliver_policy: "all", ack_policy: "explicit", ...want };
	const info = async () =>
		jsm.consumers.info(stream, durable).catch((err: { code?: unknown; message?: string } | undefined) => {
			if (/not found|404/i.test(String(err?.code ?? "") + err?.message)) return undefined;
			throw err;
		});
	let group: JsConsumerInfo | undefined = await info();
	if (group?.config.deliver_subject) {
		const floor = Number(group.ack_floor?.stream_seq ?? 0);
		await jsm.consumers.delete(stream, durable);
		warn(`event stream: group ${sub.group} was a push consumer; it is a pull consumer from stream sequence ${floor + 1} on`);
		group = undefined;
		if (floor) Object.assign(config, { deliver_policy: "by_start_sequence", opt_start_seq: floor + 1 });
	}
	if (!group) {
		// Another instance may create it at the same moment: whichever came first is the group.
		await jsm.consumers.add(stream, config).catch(async (err: Error) => {
			if (!(group = await info()) || group.config.deliver_subject) throw err;
		});
		if (!group) return durable;
	}
	if (group.config.ack_wait !== want.ack_wait || group.config.max_ack_pending !== want.max_ack_pending) await jsm.consumers.update(stream, durable, want);
	if (["new", "last", "last_per_subject"].includes(group.config.deliver_policy))
		warn(`event stream: group ${sub.group} was created with deliver_policy ${group.config.deliver_policy}, not all`);
	return durable;
}

/** A NATS group's stop: no more requests; the handlers in progress finish (and acknowledge), events arriving now come again later. */
export async function unsubscribeNats(a: NatsAdapter, chan: AdapterChannel): Promise<void> {
	await chan.messages?.close();
	while (a.getNumberOfChannelActiveMessages(chan.id) > 0) await new Promise((r) => setTimeout(r, 100));
	if (a.activeMessages.has(chan.id)) a.stopChannelActiveMessages(chan.id);
}
