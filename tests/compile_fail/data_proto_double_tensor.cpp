// expect: DATA_PROTO_TENSORS_ARE_FLOAT32_OR_INT64
// DataProto holds float32 and int64 tensors, as verl's batches do; float64 is a mistake.
#include "verl/data/data_proto.hpp"

int main() {
  verl::data::DataProto batch;
  batch.set("advantages", verl::MatrixD::Zero(2, 3));
}
