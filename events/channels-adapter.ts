/**
 * What the production stream (events/channels.stream.ts) reads and calls of @moleculer/channels' adapter and of the
 * clients under it: the adapter's own state, the channel object it takes, JetStream's manager and consumers, Redis'
 * clients. The package's typings describe the adapter classes from their JSDoc (options and helpers loosely typed, the
 * clients as their own packages' types, which name fields this code does not use); these are the parts used, as they
 * are at run time.
 */

/** A JetStream consumer's settings (jsm.consumers add/info/update; nats.js names them as the server does). */
export interface JsConsumerConfig {
	durable_name?: string;
	filter_subject?: string;
	deliver_policy: string;
	ack_policy?: string;
	ack_wait: number;
	max_ack_pending: number;
	/** Set on a push consumer (an earlier version's group). */
	deliver_subject?: string;
	opt_start_seq?: number;
}

/** What jsm.consumers.info answers of a group. */
export interface JsConsumerInfo {
	config: JsConsumerConfig;
	ack_floor?: { stream_seq?: number };
	num_pending?: number;
	num_ack_pending?: number;
}

/** nats.js' JetStream manager: streams and consumers. */
export interface JetStreamManagerView {
	streams: {
		add(config: Record<string, unknown>): Promise<unknown>;
		info(name: string): Promise<{ config: Record<string, unknown> }>;
		update(name: string, config: Record<string, unknown>): Promise<unknown>;
	};
	consumers: {
		info(stream: string, durable: string): Promise<JsConsumerInfo>;
		add(stream: string, config: JsConsumerConfig): Promise<unknown>;
		delete(stream: string, durable: string): Promise<unknown>;
		update(stream: string, durable: string, config: Partial<JsConsumerConfig>): Promise<unknown>;
	};
}

/** A pull consumer's running requests (nats.js ConsumerMessages): closed, they end. */
export interface PulledMessages {
	close(): Promise<void | Error> | void;
}

/** The one delivered message a handler gets with its payload: NATS' JsMsg (progress, delivery count); Redis' has neither. */
export interface RawMessage {
	working?: () => void;
	info?: { deliveryCount?: number };
}

/** A channel's handler as the adapter calls it: the decoded payload, and the transport's own message. */
export type ChannelHandler = (payload: unknown, raw: RawMessage | undefined) => Promise<void>;

/** A consumer group's subscription, as the adapter takes it (its own `Channel` with the fields this code sets). */
export interface AdapterChannel {
	id: string;
	/** The subject or stream key, with the namespace prefix. */
	name: string;
	group: string;
	context: false;
	unsubscribing: boolean;
	maxInFlight: number;
	maxRetries: number;
	deadLettering: { enabled: boolean; queueName: string };
	redis: { startID: string; minIdleTime: number; claimInterval: number };
	handler?: ChannelHandler;
	/** NATS: the group's pull requests. */
	messages?: PulledMessages;
}

/** What every adapter has (the package's BaseAdapter). */
interface BaseAdapter {
	connected: boolean;
	stopping: boolean;
	activeMessages: Map<string, unknown>;
	addPrefixTopic(topic: string): string;
	publish(channel: string, payload: unknown, opts: Record<string, unknown>): Promise<void>;
	initChannelActiveMessages(channelID: string): void;
	getNumberOfChannelActiveMessages(channelID: string): number;
	stopChannelActiveMessages(channelID: string): void;
}

/** The NATS (JetStream) adapter. */
export interface NatsAdapter extends BaseAdapter {
	connection: { isClosed(): boolean; flush(): Promise<void>; close(): Promise<void>; closed(): Promise<void | Error> };
	manager: JetStreamManagerView;
	client: {
		consumers: {
			get(stream: string, durable: string): Promise<{ consume(opts: { max_messages: number; expires: number; callback: (msg: unknown) => void }): Promise<PulledMessages> }>;
		};
	};
	createConsumerHandler(chan: AdapterChannel): (err: null, msg: unknown) => Promise<void>;
}

/** One ioredis client of the Redis adapter (a consumer's, or the publisher's). */
export interface RedisClientView {
	disconnect(): void;
	ping(): Promise<string>;
	xpending(key: string, group: string): Promise<unknown>;
	xgroup(command: "DELCONSUMER", key: string, group: string, consumer: string): Promise<unknown>;
}

/** The Redis Streams adapter. */
export interface RedisAdapter extends BaseAdapter {
	clients: Map<string, RedisClientView>;
	/** The key of the publisher's client in `clients`. */
	pubName: string;
	subscribe(chan: AdapterChannel): Promise<void>;
}

export type ChannelsAdapter = NatsAdapter | RedisAdapter;

/** The broker's middleware handler wrapping (Moleculer types it for actions only), as a channel's handler goes through it. */
export interface ChannelHandlerWrapping {
	wrapHandler(type: "localChannel", handler: ChannelHandler, chan: AdapterChannel): ChannelHandler;
}

/** The channel as published and consumed (`<namespace>.<channel>`); the bare name until an adapter is attached. */
export function subjectOf(adapter: ChannelsAdapter | undefined, channel: string): string {
	return adapter ? adapter.addPrefixTopic(channel) : channel;
}

/** The NATS stream holding a channel (the adapter's naming: dots become underscores). */
export function streamNameOf(adapter: ChannelsAdapter | undefined, channel: string): string {
	return subjectOf(adapter, channel).split(".").join("_");
}
