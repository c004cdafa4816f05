/**
 * Moleculer's local discoverer with a prompter view of dead nodes (docs/production.md, "Failover"):
 * - heartbeats are timed in milliseconds and checked every CHECK_MS, so a node silent for HEARTBEAT_TIMEOUT_MS is
 *   dropped then (the stock check compares whole seconds once per timeout: up to twice the timeout and a second);
 * - a node that comes back under the same id with a new instance (a restart quicker than the timeout) fails at once
 *   the requests its previous instance had taken: that process is gone, they would wait for REQUEST_TIMEOUT_MS.
 * - a node announces its services as soon as its broker has started, not after Moleculer's 1 s debounce of service
 *   changes: until the others know them, they neither call it nor send it broadcasts (a cache reset it would miss).
 * - a node that says goodbye (DISCONNECT, a clean stop) answered or refused every request it had accepted before
 *   saying it, unless one ran past the tracking's shutdown timeout: a request to it still waiting then, sent less than
 *   that timeout before, never ran there (it came after the node had left: nobody would answer it). It fails as
 *   refused by a stopping node, which the failover middleware sends to another node whatever the action.
 * Dropping a node rejects its other pending requests (RequestRejectedError), which the failover middleware sends again
 * to another node when they are idempotent.
 */
import { Discoverers, Errors, type BrokerNode, type LoggerInstance, type ServiceBroker, type ServiceRegistry } from "moleculer";

const CHECK_MS = 250;

/** An entry of Moleculer's `transit.pendingRequests`; `startHrTime` is set by its Timeout middleware as it sends. */
interface PendingRequest {
	nodeID?: string;
	action?: { name?: string };
	ctx?: { startHrTime?: [number, number] };
	stream?: boolean;
	reject(err: Error): void;
}

/** What the discoverer uses of Moleculer's base discoverer beyond its typings (moleculer/src/registry/discoverers/base.js). */
interface DiscovererInternals {
	broker: ServiceBroker;
	logger: LoggerInstance;
	opts: { disableHeartbeatChecks?: boolean; heartbeatTimeout: number };
	registry: { nodes: { get(id: string): BrokerNode | undefined; toArray(): BrokerNode[]; disconnected(id: string, unexpected: boolean): void } };
	sendLocalNodeInfo(): Promise<void>;
}

/** What it uses of Moleculer's transit beyond its typings (moleculer/src/transit.js). */
interface TransitInternals {
	pendingRequests: Map<string, PendingRequest>;
	removePendingRequestByNodeID(nodeID: string): void;
}

export class FailoverDiscoverer extends Discoverers.Local {
	private seen = new Map<string, number>();
	private lastCheck = 0;
	private checkTimer?: NodeJS.Timeout;

	private get self(): DiscovererInternals {
		return this as unknown as DiscovererInternals;
	}

	private get transitInternals(): TransitInternals | undefined {
		return this.transit as unknown as TransitInternals | undefined;
	}

	init(registry: ServiceRegistry): void {
		super.init(registry);
		if (this.transit) this.self.broker.localBus.on("$broker.started", () => this.self.sendLocalNodeInfo());
	}

	startHeartbeatTimers(): void {
		super.startHeartbeatTimers();
		// The stock per-timeout check is replaced by a finer one.
		if (this.checkNodesTimer) clearInterval(this.checkNodesTimer);
		clearInterval(this.checkTimer);
		this.lastCheck = Date.now();
		this.checkTimer = setInterval(() => this.checkRemoteNodes(), CHECK_MS);
		this.checkTimer.unref();
	}

	stopHeartbeatTimers(): void {
		super.stopHeartbeatTimers();
		clearInterval(this.checkTimer);
		this.checkTimer = undefined;
	}

	heartbeatReceived(nodeID: string, payload: Record<string, unknown>): void {
		this.seen.set(nodeID, Date.now());
		super.heartbeatReceived(nodeID, payload);
	}

	processRemoteNodeInfo(nodeID: string, payload: Record<string, unknown>): BrokerNode {
		this.seen.set(nodeID, Date.now());
		const known = this.self.registry.nodes.get(nodeID);
		if (known?.available && known.instanceID && payload.instanceID && known.instanceID !== payload.instanceID) {
			this.self.logger.warn(`Node '${nodeID}' restarted: its previous instance's pending requests fail now.`);
			this.transitInternals?.removePendingRequestByNodeID(nodeID);
		}
		return super.processRemoteNodeInfo(nodeID, payload);
	}

	remoteNodeDisconnected(nodeID: string, isUnexpected: boolean): unknown {
		if (!isUnexpected) this.refuseUnreached(nodeID);
		return super.remoteNodeDisconnected(nodeID, isUnexpected);
	}

	/** The requests to `nodeID` sent within the shutdown timeout, failed as refused by that (stopping) node. */
	private refuseUnreached(nodeID: string): void {
		const pending = this.transitInternals?.pendingRequests;
		const withinMs = Number(this.self.broker.options.tracking?.shutdownTimeout ?? 0);
		if (!pending || !withinMs) return;
		for (const [id, req] of pending) {
			const sent = req.ctx?.startHrTime;
			if (req.nodeID !== nodeID || req.stream || !sent) continue;
			const [s, ns] = process.hrtime(sent);
			if (s * 1000 + ns / 1e6 >= withinMs) continue;
			pending.delete(id);
			const err = new Errors.ServiceNotAvailableError({ action: req.action?.name, nodeID });
			(err as { nodeID?: string }).nodeID = nodeID;
			req.reject(err);
		}
	}

	checkRemoteNodes(): void {
		const opts = this.self.opts;
		if (opts.disableHeartbeatChecks) return;
		const now = Date.now();
		// This process was stalled (a long synchronous task, a loaded machine): heartbeats that arrived meanwhile wait
		// behind this timer. Judge on the next round, not on a stale view.
		const stalled = now - this.lastCheck > 2 * CHECK_MS;
		this.lastCheck = now;
		if (stalled) return;
		const timeoutMs = opts.heartbeatTimeout * 1000;
		for (const node of this.self.registry.nodes.toArray()) {
			if (node.local || !node.available) continue;
			const last = this.seen.get(node.id);
			if (last === undefined) {
				this.seen.set(node.id, now);
				continue;
			}
			if (now - last > timeoutMs) {
				this.self.logger.warn(`No heartbeat from '${node.id}' for ${now - last} ms: dropped.`);
				this.self.registry.nodes.disconnected(node.id, true);
			}
		}
	}
}
