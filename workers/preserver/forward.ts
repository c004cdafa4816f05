/**
 * The embedded broker's decision for each message it is about to deliver to a token holder (docs/mqtt.md, "Each
 * message, decided at delivery"). A subscription was allowed once, at SUBSCRIBE; what a message may carry is decided
 * again for every delivery, with the holder's token of the moment and the node's grant index of the moment, by the
 * delivery decision the live cursors ask (authority/delivery.ts): a grant deleted or narrowed after SUBSCRIBE applies
 * to the next message.
 *
 * A message on `<root>/<kind>/<subject>/<service>/<collection>/<id>` is the change event of lib/mqtt.ts mqttPayload.
 * The holder's view is the one a GET of `<service>/<collection>` would have with the zone of the topic (owner → `own`,
 * share → `share`, client → `client`) and without the soft-delete condition (a delete or a restore is a change of the
 * zone's documents like any other). Each image of the event (`before`, `after`) the view admits is kept, presented
 * through the view's field list; an image it does not admit is left out; a message neither image of which is admitted,
 * or whose holder may not read the collection any more, is not delivered.
 */
import { admits, imageOf, viewOrNone, watcherOf, type Watcher } from "../../authority/delivery";
import type { GrantIndex } from "../../lib/grants";
import { present } from "../../lib/present";
import { identityOf, type TokenClaims } from "../../lib/types";

type Image = NonNullable<ReturnType<typeof imageOf>>;

/** A published change event, read once per message (every delivery of one message shares its payload buffer). */
interface ChangeMessage {
	event: Record<string, unknown>;
	before?: Image;
	after?: Image;
	/** The narrower payloads made of it, by images kept and field list: holders of one role share theirs. */
	shown?: Map<string, Buffer>;
}

/** The zone of each topic kind: the documents the publisher sends to that topic (lib/mqtt.ts changeTopics). */
const ZONE_OF: Record<string, string> = { owner: "own", share: "share", client: "client" };
/** The view is that of every document of the zone, deleted or not (authority/authority.ts enforce). */
const HEADERS = { "x-exclude-soft-delete-query": "1" };

const messages = new WeakMap<Buffer, ChangeMessage | null>();

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** The change event of a payload, or null when it is none (such a message is never delivered to a token holder). */
function messageOf(payload: Buffer): ChangeMessage | null {
	let m = messages.get(payload);
	if (m !== undefined) return m;
	m = null;
	try {
		const event: unknown = JSON.parse(payload.toString("utf8"));
		const image = (d: unknown) => (isObject(d) && typeof d.id === "string" ? imageOf(d) : undefined);
		if (isObject(event) && (event.before === undefined || image(event.before)) && (event.after === undefined || image(event.after)))
			m = { event, before: image(event.before), after: image(event.after) };
	} catch {
		m = null;
	}
	messages.set(payload, m);
	return m;
}

/**
 * One token holder's views, one per topic kind and collection it receives, each kept while its token is the same (a
 * view caches its plan by grant index: authority/delivery.ts viewAt).
 */
export class ForwardViews {
	private token?: TokenClaims;
	private readonly watchers = new Map<string, Watcher | null>();

	private readonly prefix: string;

	/** `root`: MQTT_TOPIC_ROOT; `ip`: the address the holder's grants see (its socket's, or the one a bridge named). */
	constructor(
		root: string,
		private readonly ip?: string,
	) {
		this.prefix = `${root}/`;
	}

	/**
	 * The payload this holder receives for a message on `topic`: `payload` itself when its view admits every image and
	 * hides no field, a narrower one, or null (not delivered). Throws what the view throws besides a refusal (a limit).
	 */
	payloadFor(token: TokenClaims, index: GrantIndex, topic: string, payload: Buffer): Buffer | null {
		if (!topic.startsWith(this.prefix)) return null;
		const levels = topic.slice(this.prefix.length).split("/");
		if (levels.length !== 5) return null;
		const [kind, subject, service, collection] = levels;
		const zone = ZONE_OF[kind];
		// Only the holder's own topics (SUBSCRIBE allowed no other; checked again, it costs nothing).
		if (!zone || subject !== (kind === "client" ? token.cid : identityOf(token))) return null;
		const msg = messageOf(payload);
		if (!msg) return null;
		const w = this.watcher(token, kind, service, collection);
		const plan = w && viewOrNone(w, index);
		if (!plan) return null;
		const was = admits(plan, msg.before);
		const is = admits(plan, msg.after);
		if (!was && !is) return null;
		if (plan.fields === null && was === !!msg.before && is === !!msg.after) return payload;
		// Holders whose views keep the same images through the same field list get the same payload.
		const key = `${+was}${+is}${kind}/${service}/${collection}:${plan.fields?.join(",") ?? "*"}`;
		const shown = (msg.shown ??= new Map());
		let out = shown.get(key);
		if (!out) {
			const { before: _before, after: _after, ...rest } = msg.event;
			const body = { ...rest, ...(was ? { before: present(w.col, msg.before!, plan.fields) } : {}), ...(is ? { after: present(w.col, msg.after!, plan.fields) } : {}) };
			shown.set(key, (out = Buffer.from(JSON.stringify(body), "utf8")));
		}
		return out;
	}

	private watcher(token: TokenClaims, kind: string, service: string, collection: string): Watcher | null {
		if (token !== this.token) {
			this.token = token;
			this.watchers.clear();
		}
		const key = `${kind}/${service}/${collection}`;
		let w = this.watchers.get(key);
		if (w === undefined) {
			try {
				w = watcherOf(service, collection, token, { zone: ZONE_OF[kind] }, HEADERS, this.ip);
			} catch {
				w = null; // no such collection: nothing of it is delivered
			}
			this.watchers.set(key, w);
		}
		return w;
	}
}
