/**
 * The gateway's `this` (services/api.service.ts): moleculer-web's part, the state its `created` sets, and its methods,
 * which services/api/*.ts define (answer.ts, forked-handler.ts, rate-limit.ts, cursor-stream.ts, files.ts).
 */
import type { IncomingMessage, Server } from "http";
import type { Context, Endpoint, Service } from "moleculer";
import type { PlatformConfig } from "../../runtime/config";
import type { KeyValue } from "../../runtime/kv";
import type { TransportWatch } from "../../runtime/transport-watch";
import type { Authenticated, Authenticator } from "../../authority/authenticate";
import type { startShipper } from "../../events/audit-shipper";
import type { AliasIndex } from "./alias-index";
import type { Cors } from "./cors";
import type { Drain } from "./drain";
import type { Idempotency } from "./idempotency";
import type { LiveCursors } from "./live-cursor";
import type { McpEndpoint } from "./mcp";
import type { MqttWebSocketBridge } from "./mqtt-ws";
import type { GatewayContext, GatewayRequest, GatewayResponse, WebAlias, WebRoute } from "./web";

export type Req = GatewayRequest;
export type Res = GatewayResponse;
export type Ctx = GatewayContext;
export type Alias = { action?: string | null; method?: string; fullPath?: string };

/**
 * moleculer-web's own state and methods the gateway reads or calls (its src/index.js; its typings declare none of
 * them). `server` is the plain HTTP server it creates (the gateway sets no `https` or `http2`).
 */
interface WebGateway {
	server?: Server;
	aliases: WebAlias[];
	_trackedContexts: Context[];
	_serviceSpecification: { actions: Record<string, unknown> };
	parseQueryString(req: IncomingMessage): { query: Record<string, unknown> };
	logRequest(req: Req): void;
	corsHandler(route: WebRoute, req: Req, res: Res): boolean;
	aliasHandler(req: Req, res: Res, alias: WebAlias): Promise<unknown>;
	errorHandler(req: Req, res: Res, err: Error): void;
}

/** The broker registry's private-endpoint factory (Moleculer's typings leave it out). */
export interface PrivateEndpoints {
	createPrivateActionEndpoint(action: unknown): Endpoint;
}

/** The gateway's `this` (lib/service.ts): moleculer-web's part, the state `created` sets, and the gateway's methods. */
export type Gateway = Service &
	WebGateway & {
		cfg: PlatformConfig;
		restEndpoint: Endpoint;
		audit?: ReturnType<typeof startShipper>;
		/** Open cursor streams per principal on this gateway (see streamCursor). */
		openCursors: Map<string, number>;
		kv: KeyValue;
		transport: TransportWatch;
		idempotency: Idempotency;
		authenticator: Authenticator;
		mcp: McpEndpoint;
		liveCursors: LiveCursors;
		mqttWs: MqttWebSocketBridge;
		drain: Drain;
		cors: Cors;
		healthTimer?: NodeJS.Timeout;
		aliasIndex?: { of: AliasIndex<WebAlias>; length: number };
		streamCursor(req: Req, res: Res, action: string): Promise<void>;
		handleUpload(req: Req, res: Res, action: string): Promise<void>;
		handleDownload(req: Req, res: Res, action: string): Promise<void>;
		serveMcp(ctx: Ctx, route: WebRoute, req: Req, res: Res, alias: Alias | undefined): Promise<void>;
		resolveAlias(url: string, method?: string): { alias: WebAlias; params: Record<string, unknown> } | false;
		authenticate(ctx: Ctx, route: unknown, req: Req, res: Res, alias?: Alias): Promise<null>;
		limitedAuthentication(ctx: Ctx, req: Req, res: Res, alias?: Alias, opts?: { allowRevoked: boolean }): Promise<Authenticated>;
		limitRate(res: Res, who: string): Promise<void>;
		prepareMeta(ctx: Ctx, req: Req): void;
		sendErrorBody(req: Req, res: Res, err: unknown): void;
		sendText(res: Res, status: number, body: string | Buffer, type: string): void;
		serveConsole(req: Req, res: Res, asset?: string): Promise<void>;
		handleStatus(req: Req, res: Res): Promise<void>;
	};
