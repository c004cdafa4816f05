/**
 * publisher (4050): one MQTT message per change and topic (docs/mqtt.md): the document owner's topic, each share's,
 * each client's, QoS 1, payload = the change event JSON. Broker: MQTT_URL, else the preserver's embedded broker
 * (found through `preserver.brokerUrl`). Reads the change stream as its own consumer group, in batches: a batch counts
 * as handled once the broker acknowledged every one of its messages (PUBACK), so a broker outage delays messages and
 * never loses them (at least once: a subscriber may see a message twice).
 * It is also the outbound relay of email, SMS and Web Push (workers/publisher/delivery.ts, docs/communications.md).
 */
import type { MqttClient } from "mqtt";
import { randomBytes } from "crypto";
import { configOf, loadKeys, type PlatformConfig } from "../runtime/config";
import { changeTopics, mqttPayload, PUBLISHER_USERNAME, publisherPassword } from "../lib/mqtt";
import type { Service } from "moleculer";
import type { OutboxRecord } from "../events/outbox";
import type { ChangeStream } from "../events/stream";
import { WORKER_PORTS } from "./index";
import { BROKER_URL_ACTION } from "./preserver.worker";
import { workerService } from "./worker";
import { Delivery } from "./publisher/delivery";

const CONNECT_WAIT_MS = 5_000;
const PUBACK_TIMEOUT_MS = 10_000;
const PRESERVER_WAIT_MS = 10_000;
const MESSAGES_TOTAL = "publisher.mqtt.messages.total";

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
	let t: NodeJS.Timeout | undefined;
	return Promise.race([p, new Promise<T>((_, reject) => (t = setTimeout(() => reject(new Error(`${what} timed out`)), ms)))]).finally(() => clearTimeout(t));
}

/** Resolves on the client's next `connect`, rejects after `ms`; the listener never outlives the wait. */
function connected(client: MqttClient, ms: number): Promise<void> {
	return new Promise((resolve, reject) => {
		const done = () => {
			clearTimeout(t);
			resolve();
		};
		const t = setTimeout(() => {
			client.off("connect", done);
			reject(new Error("connecting to the MQTT broker timed out"));
		}, ms);
		client.once("connect", done);
	});
}

/** The publisher's `this` (lib/service.ts). */
type Publisher = Service & {
	cfg: PlatformConfig;
	publisherSecret: string;
	delivery: Delivery;
	/** The change stream (workers/worker.ts). */
	stream: ChangeStream;
	stopping?: boolean;
	connecting?: Promise<MqttClient>;
	mqtt?: MqttClient;
	/** The broker's address in use. */
	url?: string;
	brokerUrl(): Promise<string>;
	client(): Promise<MqttClient>;
	dropClient(): Promise<void>;
	publishChanges(recs: OutboxRecord[]): Promise<void>;
	mayHaveSubscribers(): boolean;
};

/** What the publisher asks of the preserver's service on its node (workers/preserver.worker.ts). */
type PreserverLike = { mayHaveSubscribers?: (url: string | undefined) => boolean };

export default workerService<Publisher>(
	{
		name: "publisher",
		port: WORKER_PORTS.publisher,
		// A batch's messages go out together and the batch is handled once the broker acknowledged all of them.
		async onChanges(this: Publisher, recs: OutboxRecord[]) {
			await this.publishChanges(recs);
		},
		checks(this: Publisher) {
			return { "mqtt broker": async () => !!this.mqtt?.connected, ...this.delivery.checks() };
		},
	},
	{
		created(this: Publisher) {
			const cfg = configOf(this.broker);
			this.cfg = cfg;
			this.publisherSecret = publisherPassword(loadKeys(cfg).jwtSecret);
			if (this.broker.isMetricsEnabled() && !this.broker.metrics.hasMetric(MESSAGES_TOTAL))
				this.broker.metrics.register({ type: "counter", name: MESSAGES_TOTAL, labelNames: ["kind"], description: "MQTT messages acknowledged by the broker, by topic kind" });
			// Outbound email, SMS and Web Push (workers/publisher/delivery.ts): its own consumer group of the change stream.
			this.delivery = new Delivery(this.broker, cfg, this.logger);
		},

		async started(this: Publisher) {
			await this.delivery.start(this.stream);
			// Connect now so /status reports the broker from the start; a broker that is down is retried on use.
			await this.client().catch((err: Error) => this.logger.warn(`publisher: MQTT broker not reachable yet (${err.message}); retrying`));
		},

		async stopped(this: Publisher) {
			this.stopping = true;
			await this.delivery.stop();
			await this.dropClient();
		},

		methods: {
			/** MQTT_URL, else the embedded broker's address (waiting a little for the preserver to be up). */
			async brokerUrl(this: Publisher): Promise<string> {
				if (this.cfg.mqttUrl) return this.cfg.mqttUrl;
				await this.broker.waitForServices(["preserver"], PRESERVER_WAIT_MS);
				const r = (await this.broker.call(BROKER_URL_ACTION)) as { url: string } | null;
				if (!r?.url) throw new Error("no MQTT broker: the preserver runs no embedded broker and MQTT_URL is not set");
				return r.url;
			},

			/** The connected client (one per publisher instance), created on first use. */
			async client(this: Publisher): Promise<MqttClient> {
				if (this.stopping) throw new Error("publisher is stopping");
				this.connecting ??= (async () => {
					const url = await this.brokerUrl();
					this.url = url;
					const own = new URL(url);
					const client = (require("mqtt") as typeof import("mqtt")).connect(url, {
						clientId: `platform-publisher-${randomBytes(6).toString("hex")}`,
						clean: true,
						reconnectPeriod: 1000,
						connectTimeout: CONNECT_WAIT_MS,
						// Credentials in MQTT_URL win; otherwise the publisher's own login (the preserver's hooks accept it).
						...(own.username ? {} : { username: PUBLISHER_USERNAME, password: this.publisherSecret }),
					});
					client.on("error", (err) => this.logger.debug(`publisher: mqtt ${err.message}`));
					if (!this.cfg.mqttUrl)
						// The embedded broker may come back elsewhere (a free port): start over from its address.
						client.on("offline", () => {
							if (this.mqtt === client) void this.dropClient();
						});
					this.mqtt = client;
					return client;
				})();
				const pending = this.connecting;
				pending.catch(() => {
					if (this.connecting === pending) this.connecting = undefined;
				});
				const client = await pending;
				if (!client.connected) await connected(client, CONNECT_WAIT_MS);
				return client;
			},

			async dropClient(this: Publisher) {
				const client = this.mqtt;
				this.mqtt = undefined;
				this.connecting = undefined;
				if (!client) return;
				// mqtt.js fails the in-flight QoS 1 publishes of a forced end only without reconnection: so the changes
				// waiting on them are retried at once instead of after their timeout.
				client.options.reconnectPeriod = 0;
				await client.endAsync(true).catch(() => undefined);
			},

			/**
			 * Every topic of each change, QoS 1; resolves when the broker acknowledged all of them. Nothing is sent when
			 * the broker is this node's embedded one and no token holder has connected to it since it started (the
			 * preserver's `mayHaveSubscribers`): nobody could receive those messages.
			 */
			async publishChanges(this: Publisher, recs: OutboxRecord[]) {
				const root = this.cfg.mqttTopicRoot;
				const targets = recs.map((rec) => ({ rec, topics: changeTopics(root, rec) })).filter((x) => x.topics.length);
				if (!targets.length) return;
				const client = await this.client();
				if (!this.mayHaveSubscribers()) return;
				const acks: Promise<unknown>[] = [];
				for (const { rec, topics } of targets) {
					const payload = mqttPayload(rec.event);
					for (const t of topics) acks.push(client.publishAsync(t, payload, { qos: 1 }));
				}
				// One timer for the batch, not one per message.
				await withTimeout(Promise.all(acks), PUBACK_TIMEOUT_MS, `publishing ${acks.length} messages`);
				if (this.broker.isMetricsEnabled())
					for (const { topics } of targets) for (const t of topics) this.broker.metrics.increment(MESSAGES_TOTAL, { kind: t.slice(root.length + 1).split("/")[0] });
			},

			/** False only when the broker in use is this node's embedded one and it cannot hold a subscription yet. */
			mayHaveSubscribers(this: Publisher): boolean {
				const preserver = this.cfg.mqttUrl ? null : (this.broker.getLocalService("preserver") as PreserverLike | undefined);
				return !preserver || typeof preserver.mayHaveSubscribers !== "function" || preserver.mayHaveSubscribers(this.url) !== false;
			},
		},
	},
);
