//! The JS the SDK reaches beyond web-sys's typed getters.
//!
//! Objects read and written with Rust strings as keys: js-sys's
//! `Reflect` takes the key as a `JsValue` (one more import call and an
//! externref to free per access) and checks for an exception each time;
//! these bindings hand the key over as a string. `Reflect.get` and
//! `Reflect.set` only throw for a target that is not an object: `get` checks
//! that first, and `set` is only given objects the SDK created.

use alloc::string::String;

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = Reflect, js_name = get)]
    fn reflect_get(o: &JsValue, key: &str) -> JsValue;
    #[wasm_bindgen(js_namespace = Reflect, js_name = get)]
    fn reflect_at(o: &JsValue, index: u32) -> JsValue;
    #[wasm_bindgen(js_namespace = Reflect, js_name = set)]
    fn reflect_set(o: &JsValue, key: &str, value: &JsValue);
    #[wasm_bindgen(js_namespace = Reflect, js_name = set)]
    fn reflect_set_str(o: &JsValue, key: &str, value: &str);
}

/// A property of a JS object; undefined when `o` is not an object.
pub fn get(o: &JsValue, key: &str) -> JsValue {
    if o.is_object() {
        reflect_get(o, key)
    } else {
        JsValue::UNDEFINED
    }
}

/// A property of a browser object (`location.href`, `event.type`…): one
/// import for all of them, where web-sys has one per property, each with
/// its own glue function (a string getter's copies the string into the wasm).
pub fn prop(o: &JsValue, key: &str) -> JsValue {
    reflect_get(o, key)
}

/// A string property of a browser object; empty when it is not a string.
pub fn prop_str(o: &JsValue, key: &str) -> String {
    prop(o, key).as_string().unwrap_or_default()
}

/// Element `i` of a JS array; undefined past its end or when `a` is not an object.
pub fn at(a: &JsValue, i: u32) -> JsValue {
    if a.is_object() {
        reflect_at(a, i)
    } else {
        JsValue::UNDEFINED
    }
}

/// Sets a property of an object the SDK made.
pub fn set(o: &JsValue, key: &str, value: &JsValue) {
    reflect_set(o, key, value);
}

/// Sets a property of an object the SDK made to a string.
pub fn set_str(o: &JsValue, key: &str, value: &str) {
    reflect_set_str(o, key, value);
}

#[wasm_bindgen]
extern "C" {
    /// Any browser object, for the calls below, which cannot throw with the
    /// SDK's arguments. web-sys declares such methods with `catch`: an
    /// exception check after every call and a wrapper around every import.
    pub type Dom;
    #[wasm_bindgen(method, js_name = call)]
    pub fn call1(this: &Dom, context: &JsValue, arg: &JsValue);
    /// Of an object the SDK built from strings and booleans: always a string.
    #[wasm_bindgen(js_namespace = JSON)]
    pub fn stringify(value: &JsValue) -> JsValue;
}

/// `o` seen as a `Dom` for the calls above.
pub fn dom(o: &JsValue) -> &Dom {
    o.unchecked_ref()
}
