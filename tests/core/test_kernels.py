"""Constants the compiled kernels and the Python layer must agree on (declared once per side)."""
import numpy as np

from ipukern.conv.params import MAX_KERNEL_PARAM
from ipukern._kernels import _conv, _vertices
from ipukern.conv import codelet
from ipukern.core.vertices import DTYPE_CODE
from ipukern.dtypes import DTYPES


def test_dtype_codes_agree_with_the_c_enum():
    """ipk_dtype.h's IPK_F32 / IPK_F16 (through ipk.pxd) are the codes Python passes."""
    assert _vertices.DTYPE_CODES == DTYPE_CODE
    assert set(DTYPE_CODE) == set(DTYPES)
    for name, code in DTYPE_CODE.items():
        assert codelet.NP_DTYPES[code] == DTYPES[name].type


def test_conv_limits_agree():
    assert codelet.MAX_KERNEL_PARAM is MAX_KERNEL_PARAM == _conv.MAX_PARAM == 64


def test_status_codes_are_distinct():
    codes = [getattr(_conv, n) for n in dir(_conv) if n.startswith("STATUS_")]
    assert len(codes) == len(set(codes)) == 8 and _conv.STATUS_OK == 0
    assert np.issubdtype(type(codes[0]), np.integer) or isinstance(codes[0], int)
