/**
 * The console's small kit: history routing under /console, labelled inputs, error boxes, JSON display. Styles are
 * classes of style.css only (the CSP allows no inline style attribute).
 */
import type { ComponentChildren } from "preact";
import { useEffect, useId, useState } from "preact/hooks";
import { HttpError } from "./api";

export const BASE = "/console";

const routeListeners = new Set<() => void>();
window.addEventListener("popstate", () => routeListeners.forEach((f) => f()));

/** The address below /console, without the query (`/content/notes`), and its query. */
export function useRoute(): { path: string; search: URLSearchParams } {
	const [, tick] = useState(0);
	useEffect(() => {
		const f = () => tick((n) => n + 1);
		routeListeners.add(f);
		return () => void routeListeners.delete(f);
	}, []);
	const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) || "/" : "/";
	return { path, search: new URLSearchParams(location.search) };
}

export function navigate(to: string, replace = false): void {
	const url = to.startsWith(BASE) ? to : BASE + (to === "/" ? "" : to);
	if (url === location.pathname + location.search) return;
	history[replace ? "replaceState" : "pushState"](null, "", url);
	routeListeners.forEach((f) => f());
	window.scrollTo(0, 0);
}

/** A link inside the console: a plain left click moves without a reload (the tokens live in memory). */
export function Link(props: { to: string; children: ComponentChildren; class?: string; "aria-current"?: "page" | undefined }) {
	const href = props.to.startsWith(BASE) ? props.to : BASE + props.to;
	return (
		<a
			href={href}
			class={props.class}
			aria-current={props["aria-current"]}
			onClick={(e) => {
				if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
				e.preventDefault();
				navigate(href);
			}}
		>
			{props.children}
		</a>
	);
}

/** A labelled input: every input of the console has a label (screen readers, and the tests find them by it). */
export function Field(props: {
	label: string;
	value: string;
	onInput: (v: string) => void;
	type?: "text" | "password" | "url" | "email" | "number";
	name?: string;
	required?: boolean;
	autoComplete?: string;
	placeholder?: string;
	hint?: string;
	multiline?: number;
	inputMode?: "numeric" | "text" | "email" | "url";
	list?: string;
}) {
	const id = useId();
	const common = {
		id,
		name: props.name,
		value: props.value,
		required: props.required,
		placeholder: props.placeholder,
		"aria-describedby": props.hint ? `${id}-hint` : undefined,
		onInput: (e: Event) => props.onInput((e.currentTarget as HTMLInputElement).value),
	};
	return (
		<div class="field">
			<label for={id}>{props.label}</label>
			{props.multiline ? (
				<textarea {...common} rows={props.multiline} spellcheck={false} />
			) : (
				<input {...({ ...common, type: props.type ?? "text", autoComplete: props.autoComplete, inputMode: props.inputMode, list: props.list } as Record<string, unknown>)} />
			)}
			{props.hint && (
				<small id={`${id}-hint`} class="hint">
					{props.hint}
				</small>
			)}
		</div>
	);
}

export function Select(props: { label: string; value: string; onChange: (v: string) => void; options: Array<string | [string, string]>; name?: string }) {
	const id = useId();
	return (
		<div class="field">
			<label for={id}>{props.label}</label>
			<select id={id} name={props.name} value={props.value} onChange={(e) => props.onChange((e.currentTarget as HTMLSelectElement).value)}>
				{props.options.map((o) => {
					const [v, l] = typeof o === "string" ? [o, o] : o;
					return (
						<option key={v} value={v}>
							{l}
						</option>
					);
				})}
			</select>
		</div>
	);
}

export function Check(props: { label: string; checked: boolean; onChange: (v: boolean) => void }) {
	const id = useId();
	return (
		<div class="check">
			<input id={id} type="checkbox" checked={props.checked} onChange={(e) => props.onChange((e.currentTarget as HTMLInputElement).checked)} />
			<label for={id}>{props.label}</label>
		</div>
	);
}

/** An error as the API told it: status, message. */
export function ErrorBox({ error }: { error: unknown }) {
	if (!error) return null;
	const e = error as HttpError | Error;
	const status = e instanceof HttpError ? `${e.status} ${e.body.error}: ` : "";
	return (
		<p class="error" role="alert">
			{status}
			{e.message}
		</p>
	);
}

export function Notice({ children }: { children: ComponentChildren }) {
	return (
		<p class="notice" role="status">
			{children}
		</p>
	);
}

/** A labelled table with its column headers; rows are the children. */
export function Table(props: { label: string; columns: string[]; children: ComponentChildren }) {
	return (
		<div class="table-wrap">
			<table aria-label={props.label}>
				<thead>
					<tr>
						{props.columns.map((c) => (
							<th key={c} scope="col">
								{c}
							</th>
						))}
					</tr>
				</thead>
				<tbody>{props.children}</tbody>
			</table>
		</div>
	);
}

export const Json = ({ value }: { value: unknown }) => <pre class="json">{JSON.stringify(value, null, 2)}</pre>;

/** A cell's text: scalars as they are, arrays and objects as compact JSON. */
export function cellText(v: unknown): string {
	if (v === null) return "null";
	if (typeof v === "object") return JSON.stringify(v);
	return String(v);
}

/** Runs an async action, keeping its error and a busy flag for the button that started it. */
export function useAction(): [busy: boolean, error: unknown, run: (f: () => Promise<unknown>) => Promise<void>, setError: (e: unknown) => void] {
	const [busy, setBusy] = useState(false);
	const [error, setError] = useState<unknown>(undefined);
	const run = async (f: () => Promise<unknown>) => {
		setBusy(true);
		setError(undefined);
		try {
			await f();
		} catch (e) {
			setError(e);
		} finally {
			setBusy(false);
		}
	};
	return [busy, error, run, setError];
}

/** Parses a JSON text typed by the user, naming what is wrong with it. */
export function parseJson(text: string, what: string): unknown {
	if (!text.trim()) return undefined;
	try {
		return JSON.parse(text);
	} catch (e) {
		throw new Error(`${what} is not valid JSON: ${(e as Error).message}`);
	}
}

export function Page(props: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
	useEffect(() => {
		document.title = `${props.title} · Platform console`;
	}, [props.title]);
	return (
		<section class="page" aria-labelledby="page-title">
			<header class="page-head">
				<h1 id="page-title" tabIndex={-1}>
					{props.title}
				</h1>
				{props.actions && <div class="actions">{props.actions}</div>}
			</header>
			{props.children}
		</section>
	);
}
