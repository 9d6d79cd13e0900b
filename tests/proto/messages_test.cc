// Messages that cross process boundaries carry model text as `bytes`: byte-level tokens can
// spell any byte sequence, and protobuf refuses to parse a `string` field that is not UTF-8
// (the verifier then quarantined the record: the tool call and its whole group were lost).
#include <gtest/gtest.h>

#include <string>

#include "proto/marlaas.pb.h"

namespace marlaas {
namespace {

const std::string kNotUtf8 =
    "ca\xff"
    "lc\xc3";

TEST(MessagesTest, ModelTextThatIsNotUtf8SurvivesTheRoundTrip) {
  pb::TrajectoryGroup g;
  g.set_tenant("t");
  g.set_failure("rollout: " + kNotUtf8);
  pb::Trajectory* tr = g.add_trajectories();
  tr->set_completion_text(kNotUtf8);
  tr->set_verifier_detail(kNotUtf8);
  pb::ToolTurn* turn = tr->add_tool_turns();
  turn->mutable_call()->set_tool(kNotUtf8);  // the name the completion wrote
  turn->mutable_call()->set_input(kNotUtf8);
  turn->mutable_result()->set_output(kNotUtf8);
  pb::TrajectoryGroup back;
  ASSERT_TRUE(back.ParseFromString(g.SerializeAsString()));
  const pb::ToolTurn& t = back.trajectories(0).tool_turns(0);
  EXPECT_EQ(t.call().tool(), kNotUtf8);
  EXPECT_EQ(t.call().input(), kNotUtf8);
  EXPECT_EQ(t.result().output(), kNotUtf8);
  EXPECT_EQ(back.trajectories(0).completion_text(), kNotUtf8);
  EXPECT_EQ(back.failure(), "rollout: " + kNotUtf8);
  pb::ToolCall call;
  call.set_tool(kNotUtf8);
  pb::ToolCall call_back;
  ASSERT_TRUE(call_back.ParseFromString(call.SerializeAsString()));
  EXPECT_EQ(call_back.tool(), kNotUtf8);
}

}  // namespace
}  // namespace marlaas
