//! Stream descriptions to and from Python dicts (see docs/vys-python.md):
//! `Producer.set_description(dict)`, `Consumer.description(producer)`
//! and the `description` of a `description_changed` message.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use splitrt_vys::described::Described;
use splitrt_vys::description::{
    DataType, Frequencies, Polarization, StreamDescription, TimeEpoch, TimeUnit,
};

/// The keys a description dict may have (`epoch` and `instance` are
/// what a consumer adds: a dict it gave may be set again).
const KEYS: [&str; 14] = [
    "data_type",
    "channels",
    "first_hz",
    "width_hz",
    "frequencies_hz",
    "polarizations",
    "baseband",
    "subband",
    "config_name",
    "time_epoch",
    "time_unit",
    "integration_ns",
    "epoch",
    "instance",
];

/// `d` as a dict: every field (`first_hz` / `width_hz` or
/// `frequencies_hz`, the other None), with its `epoch` and `instance`.
pub(crate) fn to_dict<'py>(py: Python<'py>, d: &Described) -> PyResult<Bound<'py, PyDict>> {
    let s = &d.description;
    let o = PyDict::new(py);
    o.set_item("epoch", d.epoch)?;
    o.set_item("instance", d.instance)?;
    o.set_item("data_type", s.data_type.name())?;
    o.set_item("channels", s.channels)?;
    match &s.frequencies {
        Frequencies::Linear { first_hz, width_hz } => {
            o.set_item("first_hz", *first_hz)?;
            o.set_item("width_hz", *width_hz)?;
            o.set_item("frequencies_hz", py.None())?;
        }
        Frequencies::Listed(f) => {
            o.set_item("first_hz", py.None())?;
            o.set_item("width_hz", py.None())?;
            o.set_item("frequencies_hz", f.clone())?;
        }
    }
    let pols: Vec<&str> = s.polarizations.iter().map(|p| p.name()).collect();
    o.set_item("polarizations", pols)?;
    o.set_item("baseband", s.baseband)?;
    o.set_item("subband", s.subband)?;
    o.set_item("config_name", s.config_name.as_str())?;
    o.set_item("time_epoch", s.time_epoch.name())?;
    o.set_item("time_unit", s.time_unit.name())?;
    o.set_item("integration_ns", s.integration_ns)?;
    Ok(o)
}

fn parsed<T: std::str::FromStr<Err = splitrt_vys::description::DescriptionError>>(
    s: &str,
) -> PyResult<T> {
    s.parse()
        .map_err(|e: splitrt_vys::description::DescriptionError| {
            PyValueError::new_err(e.to_string())
        })
}

/// A description from a dict: `channels` required; `data_type`
/// ("complex64"), `first_hz` + `width_hz` (0, 0) or `frequencies_hz`,
/// `polarizations` ([]), `baseband`, `subband` (0), `config_name` (""),
/// `time_epoch` ("unix"), `time_unit` ("ns"), `integration_ns` (0).
/// Unknown keys are an error (a misspelt key is not silently dropped).
pub(crate) fn from_dict(d: &Bound<'_, PyDict>) -> PyResult<StreamDescription> {
    for k in d.keys() {
        let k: String = k
            .extract()
            .map_err(|_| PyTypeError::new_err("description keys are strings"))?;
        if !KEYS.contains(&k.as_str()) {
            return Err(PyValueError::new_err(format!(
                "unknown description key '{k}': one of {}",
                KEYS.join(", ")
            )));
        }
    }
    fn get<'py, T>(d: &Bound<'py, PyDict>, k: &str, default: Option<T>) -> PyResult<T>
    where
        T: pyo3::conversion::FromPyObjectOwned<'py>,
        for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
    {
        match d.get_item(k)? {
            Some(v) if !v.is_none() => v.extract::<T>().map_err(|e| {
                let e: PyErr = e.into();
                PyTypeError::new_err(format!("description['{k}']: {e}"))
            }),
            _ => default.ok_or_else(|| PyValueError::new_err(format!("description needs '{k}'"))),
        }
    }
    let listed: Option<Vec<f64>> = get(d, "frequencies_hz", Some(None))?;
    let frequencies = match listed {
        Some(f) => {
            if d.get_item("first_hz")?.is_some_and(|v| !v.is_none())
                || d.get_item("width_hz")?.is_some_and(|v| !v.is_none())
            {
                return Err(PyValueError::new_err(
                    "description: frequencies_hz, or first_hz and width_hz, not both",
                ));
            }
            Frequencies::Listed(f)
        }
        None => Frequencies::Linear {
            first_hz: get(d, "first_hz", Some(0.0))?,
            width_hz: get(d, "width_hz", Some(0.0))?,
        },
    };
    let pols: Vec<String> = get(d, "polarizations", Some(Vec::new()))?;
    let polarizations = pols
        .iter()
        .map(|p| parsed::<Polarization>(p))
        .collect::<PyResult<Vec<_>>>()?;
    let desc = StreamDescription {
        data_type: parsed::<DataType>(&get::<String>(d, "data_type", Some("complex64".into()))?)?,
        channels: get(d, "channels", None)?,
        frequencies,
        polarizations,
        baseband: get(d, "baseband", Some(0))?,
        subband: get(d, "subband", Some(0))?,
        config_name: get(d, "config_name", Some(String::new()))?,
        time_epoch: parsed::<TimeEpoch>(&get::<String>(d, "time_epoch", Some("unix".into()))?)?,
        time_unit: parsed::<TimeUnit>(&get::<String>(d, "time_unit", Some("ns".into()))?)?,
        integration_ns: get(d, "integration_ns", Some(0))?,
    };
    desc.check()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(desc)
}
