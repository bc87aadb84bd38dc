// Types of the npm package's entry (index.js): every call waits for the wasm
// to load, so every call returns a Promise.

/** How a blocked visitor blocks. `unknown`: the check could not decide (then `blocked` is false). */
export type BlockerType = 'extension' | 'network' | 'browser' | 'unknown';

/** What `check()` resolves to. */
export interface Verdict {
  blocked: boolean;
  /** `null` for a visitor without a blocker. */
  blockerType: BlockerType | null;
}

export interface InitOptions {
  /** The site's id (a UUID). */
  siteId: string;
  /** The collector's origin, e.g. `https://collector.example.com`. */
  endpoint?: string;
  /** Forces a wall variant by name (its sessions are left out of A/B results). */
  variant?: string;
  /** Logs each verdict to the console. */
  debug?: boolean;
  /** Keeps the page URL's `utm_*` parameters in the events sent (query string and fragment are otherwise left out). */
  keepUtm?: boolean;
  /** Where to fetch the SDK's wasm; by default next to this module. */
  wasmUrl?: string | URL;
}

/** Starts the SDK for a site (session, `pageview`, then detection once the page is idle). A second call is ignored. */
export function init(options: InitOptions): Promise<void>;

/** Runs a detection now. */
export function check(): Promise<Verdict>;

/** The visitor's session id (a UUID). */
export function getSessionId(): Promise<string>;

/** Shows the wall whatever the detection says; its events carry `debug: true`. */
export function forceDisplay(): Promise<void>;

/** Hides the wall. */
export function hide(): Promise<void>;
